//! serde's type errors in the words of the JSON (or YAML) a user wrote: a 422 cause or a
//! refusal said `expected i64` or `expected struct LabelSelector`, Rust's names for what the
//! user must write as an integer or an object.

/// `s` cut to 200 bytes (at a character boundary) with `...` after it: a value quoted in an
/// error message comes from untrusted input and must keep the message readable.
pub(crate) fn shown(s: &str) -> String {
    if s.len() <= 200 {
        s.to_string()
    } else {
        format!("{}...", &s[..s.floor_char_boundary(200)])
    }
}

/// What a JSON value is, as an error message names it ("got a list").
pub fn kind_of(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `message` with serde's names of types (in `invalid type: X, expected Y`) put as JSON names
/// them; any other message unchanged.
pub fn in_json_terms(message: &str) -> String {
    let Some((head, expected)) = message.rsplit_once(", expected ") else { return message.to_string() };
    if let Some(got) = head.strip_prefix("invalid type: ") {
        return format!("invalid type: {}, expected {}", got_in_json(got), expected_in_json(expected));
    }
    // An integer out of the type's range: "expected an integer" would contradict it.
    if head.starts_with("invalid value: ") {
        if let Some(range) = integer_range(expected) {
            return format!("{head}, expected an integer from {range}");
        }
    }
    format!("{head}, expected {}", expected_in_json(expected))
}

/// The range of a Rust integer type, as a user would write its bounds.
fn integer_range(ty: &str) -> Option<String> {
    Some(match ty {
        "u8" => format!("0 to {}", u8::MAX),
        "u16" => format!("0 to {}", u16::MAX),
        "u32" => format!("0 to {}", u32::MAX),
        "u64" | "usize" => format!("0 to {}", u64::MAX),
        "i8" => format!("{} to {}", i8::MIN, i8::MAX),
        "i16" => format!("{} to {}", i16::MIN, i16::MAX),
        "i32" => format!("{} to {}", i32::MIN, i32::MAX),
        "i64" | "isize" => format!("{} to {}", i64::MIN, i64::MAX),
        _ => return None,
    })
}

fn got_in_json(got: &str) -> String {
    match got {
        "map" => "object".into(),
        "sequence" => "list".into(),
        "unit value" => "null".into(),
        other => match other.strip_prefix("floating point ") {
            Some(n) => format!("number {}", n.trim_matches('`')),
            None => other.to_string(),
        },
    }
}

fn expected_in_json(expected: &str) -> &str {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => {
            "an integer"
        }
        "f32" | "f64" => "a number",
        "a sequence" => "a list",
        "a map" => "an object",
        other if other.starts_with("struct ") => "an object",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_type_names_become_json_ones() {
        let cases = [
            ("invalid type: string \"0644\", expected i64", "invalid type: string \"0644\", expected an integer"),
            (
                "invalid type: string \"x\", expected struct LabelSelector",
                "invalid type: string \"x\", expected an object",
            ),
            ("invalid type: string \"nope\", expected a sequence", "invalid type: string \"nope\", expected a list"),
            ("invalid type: map, expected a string", "invalid type: object, expected a string"),
            ("invalid type: sequence, expected u32", "invalid type: list, expected an integer"),
            ("invalid type: floating point `1.5`, expected i64", "invalid type: number 1.5, expected an integer"),
            (
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected an integer from 0 to 4294967295",
            ),
            (
                "invalid value: integer `9223372036854775808`, expected i64",
                "invalid value: integer `9223372036854775808`, expected an integer from -9223372036854775808 to \
                 9223372036854775807",
            ),
            ("missing field `path`", "missing field `path`"),
            ("invalid type: string \"yes\", expected a boolean", "invalid type: string \"yes\", expected a boolean"),
        ];
        for (serde, json) in cases {
            assert_eq!(in_json_terms(serde), json, "{serde}");
        }
        // What is not serde's is left as it is.
        assert_eq!(in_json_terms("path must be absolute"), "path must be absolute");
    }
}
