//! kubectl's JSONPath templates, for `get -o jsonpath=...` and `-o custom-columns=...`: what
//! OpenShift users script against (`oc get mcp worker -o jsonpath='{.status.machineCount}'`),
//! so the dialect is kubectl's (k8s.io/client-go/util/jsonpath), not RFC 9535's: text outside
//! braces is printed as it is, `{range EXPR}...{end}` iterates, `{"\n"}` is text, field names
//! hold `-` and `/` and escape a dot as `\.`, and the leading `$` is optional. No crate speaks
//! this dialect; the RFC's crates refuse `.node-role\.kubernetes\.io/worker` and know no
//! templates.
//!
//! As `kubectl get` does by default (`--allow-missing-template-keys=true`), a path that finds
//! nothing prints nothing (with `=false`, a field not found fails the template); as kubectl's,
//! an index out of an array's bounds, or an index or filter over what is no array, fails the
//! template. Strings print as they are, numbers as Go prints them, booleans, null, objects and
//! arrays as JSON, as kubectl's JSONPath prints them; custom columns print every value as Go's
//! `%v` does (`map[key:value]`).

use serde_json::Value;

/// A template or expression that does not parse; names the part at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("unclosed action in template {0:?}: a `{{` without its `}}`")]
    Unclosed(String),
    #[error("{{end}} without a {{range}} in template {0:?}")]
    EndWithoutRange(String),
    #[error("{{range}} without an {{end}} in template {0:?}")]
    RangeWithoutEnd(String),
    #[error("bad JSONPath expression {expr:?}: {why}")]
    Syntax { expr: String, why: String },
    #[error("error executing jsonpath {template:?}: {why}")]
    Exec { template: String, why: String },
}

fn syntax(expr: &str, why: impl Into<String>) -> Error {
    Error::Syntax { expr: expr.to_string(), why: why.into() }
}

/// A parsed template, evaluated against each object printed.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
    /// As given (a relaxed path as `{...}`), for errors.
    text: String,
    /// Whether a field a path does not find prints nothing (kubectl's default) rather than
    /// failing the template (`--allow-missing-template-keys=false`).
    allow_missing: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Path(Path),
    Range(Path, Vec<Part>),
}

/// Where a path starts: the object printed (`$`), or the element a `range` is at (`@`, or a
/// path with neither; at the top, that is the object).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Start {
    Root,
    Current,
}

#[derive(Debug, Clone, PartialEq)]
struct Path {
    start: Start,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    /// `*`: every value of an object, every element of an array.
    Wildcard,
    /// `..`: the value and everything under it, for the next step to select from.
    Descend,
    /// `[i]`, `[i,j]`, `['a','b']`.
    Union(Vec<Key>),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
enum Key {
    Index(i64),
    /// A quoted name, which kubectl reads as a path of fields: `['metadata.name']` is the name
    /// in the metadata, and a dot in a key is escaped there too (`['kubernetes\.io/role']`).
    Fields(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    /// None: the left side exists (`[?(@.ready)]`).
    cmp: Option<(Cmp, Operand)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Path(Path),
    Literal(Value),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Template {
    /// Parses a template such as `{range .items[*]}{.metadata.name}{"\n"}{end}`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut stack: Vec<(Path, Vec<Part>)> = Vec::new();
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let Some(open) = rest.find('{') else {
                parts.push(Part::Text(rest.to_string()));
                break;
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let inner_len = closing(&rest[open + 1..], '}').ok_or_else(|| Error::Unclosed(text.to_string()))?;
            let action = rest[open + 1..open + 1 + inner_len].trim();
            rest = &rest[open + 1 + inner_len + 1..];
            if action == "end" {
                let (path, outer) = stack.pop().ok_or_else(|| Error::EndWithoutRange(text.to_string()))?;
                let body = std::mem::replace(&mut parts, outer);
                parts.push(Part::Range(path, body));
            } else if let Some(expr) = action.strip_prefix("range ").or_else(|| action.strip_prefix("range\t")) {
                stack.push((Path::parse(expr.trim())?, std::mem::take(&mut parts)));
            } else if action.starts_with('"') || action.starts_with('\'') {
                let text = unquote(action).ok_or_else(|| syntax(action, "text in an action is one quoted string"))?;
                parts.push(Part::Text(text));
            } else if !action.is_empty() {
                parts.push(Part::Path(Path::parse(action)?));
            }
        }
        if !stack.is_empty() {
            return Err(Error::RangeWithoutEnd(text.to_string()));
        }
        Ok(Template { parts, text: text.to_string(), allow_missing: true })
    }

    /// A column of `-o custom-columns`: `.a.b`, `a.b`, `{.a.b}` alike, as kubectl relaxes them.
    pub fn parse_relaxed(expr: &str) -> Result<Self, Error> {
        let e = expr.trim();
        let e = e.strip_prefix('{').and_then(|e| e.strip_suffix('}')).unwrap_or(e);
        let e = if e.starts_with(['.', '$', '@', '[']) { e.to_string() } else { format!(".{e}") };
        Ok(Template { parts: vec![Part::Path(Path::parse(&e)?)], text: format!("{{{e}}}"), allow_missing: true })
    }

    /// The template as given; a relaxed path as kubectl writes it back, `{.a.b}`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The template, failing where a path names a field it does not find
    /// (`--allow-missing-template-keys=false`) instead of printing nothing there.
    pub fn missing_keys_fail(self) -> Self {
        Template { allow_missing: false, ..self }
    }

    /// The template's text for `obj`; an error where kubectl's execution fails (an index out
    /// of an array's bounds, a filter or an index over what is not an array).
    pub fn render(&self, obj: &Value) -> Result<String, Error> {
        let mut out = String::new();
        render_parts(&self.parts, obj, obj, self.allow_missing, &mut out).map_err(|why| self.failed(why))?;
        Ok(out)
    }

    /// What a one-path template finds in `obj`, each as kubectl's custom columns print it
    /// (Go's `%v`: an object as `map[key:value ...]`, an array as `[a b]`), where a template
    /// prints objects and arrays as JSON.
    pub fn values(&self, obj: &Value) -> Result<Vec<String>, Error> {
        Ok(self.find(obj)?.into_iter().map(go_text).collect())
    }

    /// What a one-path template finds in `obj`.
    pub fn find<'a>(&self, obj: &'a Value) -> Result<Vec<&'a Value>, Error> {
        let mut found = Vec::new();
        for p in &self.parts {
            if let Part::Path(path) = p {
                found.extend(path.eval(obj, obj, true).map_err(|why| self.failed(why))?);
            }
        }
        Ok(found)
    }

    fn failed(&self, why: String) -> Error {
        Error::Exec { template: self.text.clone(), why }
    }
}

/// `a` before `b` as kubectl's `--sort-by` orders what its path found in them (the first
/// value): numbers by value, strings (names, RFC 3339 times) as text, false before true, and
/// nothing found first. A total order, whatever mix of kinds one path finds (nothing found,
/// then booleans, numbers, and the rest as text): a sort given an inconsistent one may panic.
pub fn sort_order(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    fn rank(v: Option<&Value>) -> u8 {
        match v {
            None => 0,
            Some(Value::Bool(_)) => 1,
            Some(Value::Number(_)) => 2,
            Some(_) => 3,
        }
    }
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap_or(f64::NAN).total_cmp(&y.as_f64().unwrap_or(f64::NAN))
        }
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (Some(x), Some(y)) if rank(a) == 3 && rank(b) == 3 => text_of(x).cmp(&text_of(y)),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Why evaluating failed, as kubectl says it.
type Failure = String;

fn render_parts(
    parts: &[Part],
    root: &Value,
    cur: &Value,
    allow_missing: bool,
    out: &mut String,
) -> Result<(), Failure> {
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Path(path) => {
                let texts: Vec<String> = path.eval(root, cur, allow_missing)?.into_iter().map(text_of).collect();
                out.push_str(&texts.join(" "));
            }
            // Each value the path finds, as kubectl's: `{range .items}` is the list once,
            // `{range .items[*]}` each item.
            Part::Range(path, body) => {
                for v in path.eval(root, cur, allow_missing)? {
                    render_parts(body, root, v, allow_missing, out)?;
                }
            }
        }
    }
    Ok(())
}

/// A value as kubectl's templates print it: text as itself, a number as Go prints it, objects
/// and arrays as JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => go_number(n),
        v => v.to_string(),
    }
}

/// A value as Go's `fmt` prints what kubectl decoded it to (`%v`): `<nil>`, `map[k:v ...]` with
/// the keys sorted, `[a b]`, numbers as [`go_number`].
fn go_text(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_text).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut pairs: Vec<(&String, &Value)> = m.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            let pairs: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}:{}", go_text(v))).collect();
            format!("map[{}]", pairs.join(" "))
        }
    }
}

/// A JSON number as kubectl prints it: Kubernetes decodes one without a fraction or exponent
/// as an integer when it fits in an int64, any other as a float64, which Go's `%v` prints in the fewest digits that
/// read back, with an exponent below 1e-4 and from 1e6 (`strconv`'s `'g'`, shortest, whose
/// threshold is 6 digits whatever the number's).
fn go_number(n: &serde_json::Number) -> String {
    // An int64 when it fits, as Kubernetes decodes one; a larger one is a float64.
    if n.is_i64() {
        return n.to_string();
    }
    let Some(f) = n.as_f64() else { return n.to_string() };
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Rust's `{:e}` is the shortest that reads back too: "-1.5e-7", "1e21".
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else { return sci };
    let Ok(exp) = exp.parse::<i32>() else { return sci };
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..6).contains(&exp) {
        let tail = if digits.len() > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{}{tail}e{esign}{:02}", &digits[..1], exp.abs());
    }
    // Where the point falls among the digits.
    let point = exp + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
    };
    format!("{sign}{text}")
}

/// The length of `s` up to the first `close` outside quotes, brackets and parentheses.
fn closing(s: &str, close: char) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, c) if c == close && depth == 0 => return Some(i),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The length of the quoted literal `s` starts with (quote `q`), to its closing quote; an
/// escaped quote does not close it, as in kubectl's parser. The rest of `s` when unclosed.
fn quoted_len(s: &str, q: char) -> usize {
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == q => return i + c.len_utf8(),
            _ => {}
        }
    }
    s.len()
}

/// A quoted string's text, with `\n`, `\t`, `\\` and escaped quotes; None when not one whole
/// quoted string.
fn unquote(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = s.strip_prefix(q)?.strip_suffix(q)?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == q {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            c => out.push(c),
        }
    }
    Some(out)
}

impl Path {
    fn parse(expr: &str) -> Result<Self, Error> {
        let (start, mut rest) = match expr.as_bytes().first() {
            Some(b'$') => (Start::Root, &expr[1..]),
            Some(b'@') => (Start::Current, &expr[1..]),
            _ => (Start::Current, expr),
        };
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("..") {
                steps.push(Step::Descend);
                rest = r;
                if !rest.starts_with('[') {
                    let (name, r) = field_name(rest);
                    steps.push(if name == "*" { Step::Wildcard } else { Step::Field(name) });
                    rest = r;
                }
            } else if let Some(r) = rest.strip_prefix('.') {
                let (name, r) = field_name(r);
                match name.as_str() {
                    "" if r.is_empty() => {}
                    "" => return Err(syntax(expr, "a `.` with no field name after it")),
                    "*" => steps.push(Step::Wildcard),
                    _ => steps.push(Step::Field(name)),
                }
                rest = r;
            } else if let Some(r) = rest.strip_prefix('[') {
                let len = closing(r, ']').ok_or_else(|| syntax(expr, "a `[` without its `]`"))?;
                steps.push(bracket(expr, r[..len].trim())?);
                rest = &r[len + 1..];
            } else if steps.is_empty() && start == Start::Current {
                // `metadata.name` as `.metadata.name`, in a filter's `@` or after `$` none.
                let (name, r) = field_name(rest);
                steps.push(Step::Field(name));
                rest = r;
            } else {
                return Err(syntax(expr, format!("unexpected {:?}", rest.chars().next().unwrap_or(' '))));
            }
        }
        Ok(Path { start, steps })
    }

    /// What the path finds; with `allow_missing` false, a field found in none of the values
    /// the step before found fails it, as kubectl's `evalField` does.
    fn eval<'a>(&self, root: &'a Value, cur: &'a Value, allow_missing: bool) -> Result<Vec<&'a Value>, Failure> {
        let mut at = vec![if self.start == Start::Root { root } else { cur }];
        for step in &self.steps {
            let had_input = !at.is_empty();
            let mut next = Vec::new();
            match step {
                // As kubectl's: each member of a union over every value found so far, in turn.
                Step::Union(keys) => {
                    for k in keys {
                        match k {
                            // Strict: each key's fields over every value, as a path's are.
                            Key::Fields(fields) if !allow_missing => {
                                let mut found = at.clone();
                                for f in fields {
                                    let had = !found.is_empty();
                                    found = found.into_iter().filter_map(|v| v.get(f.as_str())).collect();
                                    if had && found.is_empty() {
                                        return Err(format!("{f} is not found"));
                                    }
                                }
                                next.extend(found);
                            }
                            k => {
                                for v in &at {
                                    next.extend(k.select(v)?);
                                }
                            }
                        }
                    }
                }
                step => {
                    for v in at {
                        next.extend(select(step, root, v, allow_missing)?);
                    }
                }
            }
            // (Nothing in, nothing out: a filter that kept nothing is not a missing field.)
            if let (false, Step::Field(name), true, true) = (allow_missing, step, had_input, next.is_empty()) {
                return Err(format!("{name} is not found"));
            }
            at = next;
        }
        Ok(at)
    }
}

/// A field name up to the next unescaped `.` or `[`; `\.` is a dot in the name.
fn field_name(s: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, n)) = chars.next() {
                    name.push(n);
                }
            }
            '.' | '[' => return (name, &s[i..]),
            c => name.push(c),
        }
    }
    (name, "")
}

fn bracket(expr: &str, inner: &str) -> Result<Step, Error> {
    if inner == "*" {
        // kubectl reads `[*]` as `[:]`: every element of an array (an object's values are `.*`).
        return Ok(Step::Slice(None, None, None));
    }
    if let Some(f) = inner.strip_prefix('?') {
        let f = f.trim();
        let f = f
            .strip_prefix('(')
            .and_then(|f| f.strip_suffix(')'))
            .ok_or_else(|| syntax(expr, "a filter is `[?(...)]`"))?;
        return Ok(Step::Filter(Box::new(Filter::parse(expr, f.trim())?)));
    }
    if inner.contains(':') && !inner.starts_with(['\'', '"']) {
        let bounds: Vec<&str> = inner.split(':').collect();
        if bounds.len() > 3 {
            return Err(syntax(expr, format!("a slice has at most three parts: [{inner}]")));
        }
        let num = |s: &str| -> Result<Option<i64>, Error> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            s.parse().map(Some).map_err(|_| syntax(expr, format!("{s:?} is not a number")))
        };
        let step = bounds.get(2).map(|s| num(s)).transpose()?.flatten();
        if step.is_some_and(|s| s <= 0) {
            return Err(syntax(expr, "a slice's step must be > 0"));
        }
        return Ok(Step::Slice(num(bounds[0])?, num(bounds[1])?, step));
    }
    let mut keys = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let len = closing(rest, ',').unwrap_or(rest.len());
        let item = rest[..len].trim();
        let quoted = item.chars().next().filter(|c| *c == '"' || *c == '\'');
        keys.push(match quoted.and_then(|q| item[1..].strip_suffix(q)) {
            Some(mut path) => {
                let mut fields = Vec::new();
                loop {
                    let (name, rest) = field_name(path);
                    fields.push(name);
                    match rest.strip_prefix('.') {
                        Some(r) => path = r,
                        None if rest.is_empty() => break,
                        None => return Err(syntax(expr, format!("unexpected {rest:?} in the name {item}"))),
                    }
                }
                Key::Fields(fields)
            }
            None => Key::Index(
                item.parse().map_err(|_| syntax(expr, format!("{item:?} is not an index or a quoted name")))?,
            ),
        });
        rest = rest.get(len + 1..).unwrap_or("");
    }
    if keys.is_empty() {
        return Err(syntax(expr, "an empty `[]`"));
    }
    Ok(Step::Union(keys))
}

impl Filter {
    fn parse(expr: &str, f: &str) -> Result<Self, Error> {
        const OPS: [(&str, Cmp); 6] =
            [("==", Cmp::Eq), ("!=", Cmp::Ne), ("<=", Cmp::Le), (">=", Cmp::Ge), ("<", Cmp::Lt), (">", Cmp::Gt)];
        // The first operator outside quotes and brackets.
        let mut found = None;
        let mut i = 0;
        while i < f.len() {
            let rest = &f[i..];
            let skip = match rest.chars().next() {
                // A quoted literal is skipped whole, to its closing quote (`\"` is not one).
                Some(q @ ('"' | '\'')) => quoted_len(rest, q),
                Some('[') => closing(&rest[1..], ']').map_or(rest.len(), |n| n + 2),
                Some(c) => {
                    if let Some((op, cmp)) = OPS.iter().find(|(op, _)| rest.starts_with(op)) {
                        found = Some((i, op.len(), *cmp));
                        break;
                    }
                    if c == '=' {
                        // `@.a="b"`, a common slip: kubectl refuses it too, rather than match
                        // nothing.
                        return Err(syntax(expr, "unrecognized filter operator = (== compares)"));
                    }
                    c.len_utf8()
                }
                None => break,
            };
            i += skip;
        }
        let operand = |s: &str| -> Result<Operand, Error> {
            let s = s.trim();
            if s.starts_with(['@', '$', '.']) {
                return Ok(Operand::Path(Path::parse(s)?));
            }
            if let Some(text) = unquote(s) {
                return Ok(Operand::Literal(Value::String(text)));
            }
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(|v| !v.is_object() && !v.is_array())
                .map(Operand::Literal)
                .ok_or_else(|| {
                    syntax(expr, format!("{s:?} is neither a path, a quoted string, a number nor a boolean"))
                })
        };
        match found {
            None => Ok(Filter { left: operand(f)?, cmp: None }),
            Some((at, len, cmp)) => Ok(Filter { left: operand(&f[..at])?, cmp: Some((cmp, operand(&f[at + len..])?)) }),
        }
    }

    /// Whether `item` passes. Strict (`allow_missing` false), a compared path that finds nothing
    /// fails the template, as kubectl's; an existence test never does.
    fn holds(&self, root: &Value, item: &Value, allow_missing: bool) -> Result<bool, Failure> {
        let strict = !allow_missing && self.cmp.is_some();
        let values = |o: &Operand| -> Result<Vec<Value>, Failure> {
            Ok(match o {
                Operand::Path(p) => p.eval(root, item, !strict)?.into_iter().cloned().collect(),
                Operand::Literal(v) => vec![v.clone()],
            })
        };
        let left = values(&self.left)?;
        let Some((cmp, right)) = &self.cmp else { return Ok(!left.is_empty()) };
        let right = values(right)?;
        Ok(left.iter().any(|l| right.iter().any(|r| compare(*cmp, l, r))))
    }
}

fn compare(cmp: Cmp, l: &Value, r: &Value) -> bool {
    use std::cmp::Ordering;
    let order = match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().zip(b.as_f64()).and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) if a == b => Some(Ordering::Equal),
        _ => None,
    };
    match cmp {
        Cmp::Eq => order == Some(Ordering::Equal),
        Cmp::Ne => order != Some(Ordering::Equal),
        Cmp::Lt => order == Some(Ordering::Less),
        Cmp::Le => matches!(order, Some(Ordering::Less | Ordering::Equal)),
        Cmp::Gt => order == Some(Ordering::Greater),
        Cmp::Ge => matches!(order, Some(Ordering::Greater | Ordering::Equal)),
    }
}

fn select<'a>(step: &Step, root: &'a Value, v: &'a Value, allow_missing: bool) -> Result<Vec<&'a Value>, Failure> {
    Ok(match step {
        Step::Field(name) => v.get(name.as_str()).into_iter().collect(),
        Step::Wildcard => match v {
            Value::Object(m) => m.values().collect(),
            Value::Array(a) => a.iter().collect(),
            _ => Vec::new(),
        },
        Step::Descend => {
            let mut all = Vec::new();
            descend(v, &mut all);
            all
        }
        Step::Union(keys) => {
            let mut found = Vec::new();
            for k in keys {
                found.extend(k.select(v)?);
            }
            found
        }
        Step::Slice(start, end, step) => match v {
            Value::Null => Vec::new(),
            Value::Array(a) => {
                slice(a.len(), *start, *end)?.step_by(step.unwrap_or(1) as usize).map(|i| &a[i]).collect()
            }
            v => return Err(format!("{} is not an array", kind_of(v))),
        },
        // Not null either: kubectl fails a filter over `conditions: null` too.
        Step::Filter(f) => match v {
            Value::Array(a) => {
                let mut kept = Vec::new();
                for item in a {
                    if f.holds(root, item, allow_missing)? {
                        kept.push(item);
                    }
                }
                kept
            }
            v => return Err(format!("{} is not an array and cannot be filtered", kind_of(v))),
        },
    })
}

/// What a JSON value is, for errors.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Key {
    fn select<'a>(&self, v: &'a Value) -> Result<Option<&'a Value>, Failure> {
        match (self, v) {
            (Key::Fields(fields), v) => Ok(fields.iter().try_fold(v, |v, f| v.get(f.as_str()))),
            (Key::Index(_), Value::Null) => Ok(None),
            (Key::Index(i), Value::Array(a)) => {
                // `[i]` is `[i:i+1]`, and `[-1]` the last one: to the end.
                let end = (*i != -1).then(|| i.saturating_add(1));
                Ok(slice(a.len(), Some(*i), end)?.next().map(|i| &a[i]))
            }
            (Key::Index(_), v) => Err(format!("{} is not an array", kind_of(v))),
        }
    }
}

fn descend<'a>(v: &'a Value, all: &mut Vec<&'a Value>) {
    all.push(v);
    match v {
        Value::Object(m) => m.values().for_each(|c| descend(c, all)),
        Value::Array(a) => a.iter().for_each(|c| descend(c, all)),
        _ => {}
    }
}

/// The indexes `[start:end]` takes of an array of `len`, as kubectl's: a negative bound counts
/// from the end (`[-1]` is the last), a bound out of the array is an error (no clamping), and
/// an empty range is nothing.
fn slice(len: usize, start: Option<i64>, end: Option<i64>) -> Result<std::ops::Range<usize>, Failure> {
    let n = len as i64;
    let from_end = |i: i64| if i < 0 { i.saturating_add(n) } else { i };
    let s = from_end(start.unwrap_or(0));
    let e = end.map_or(n, from_end);
    if s == e {
        return Ok(0..0);
    }
    if !(0..n).contains(&s) {
        return Err(format!("array index out of bounds: index {s}, length {len}"));
    }
    if !(0..=n).contains(&e) {
        return Err(format!("array index out of bounds: index {}, length {len}", e - 1));
    }
    if s > e {
        return Err(format!("starting index {s} is greater than ending index {e}"));
    }
    Ok(s as usize..e as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// kubectl's documented example input (kubernetes.io/docs/reference/kubectl/jsonpath).
    fn doc() -> Value {
        json!({
            "kind": "List",
            "items": [
                {"kind": "None", "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
                 "status": {"capacity": {"cpu": "4"}, "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
                {"kind": "None", "metadata": {"name": "127.0.0.2"},
                 "status": {"capacity": {"cpu": "8"}, "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                                                                    {"type": "another", "address": "127.0.0.3"}]}}
            ],
            "users": [{"name": "myself", "user": {}}, {"name": "e2e", "user": {"username": "admin", "password": "secret"}}]
        })
    }

    fn render(t: &str, v: &Value) -> String {
        Template::parse(t).and_then(|t| t.render(v)).unwrap_or_else(|e| panic!("{t}: {e}"))
    }

    /// Every row of kubectl's documented function table gives kubectl's result (objects as
    /// JSON, as kubectl 1.32 prints them, where the table shows Go's `map[...]`).
    #[test]
    fn kubectls_documented_examples() {
        let d = doc();
        assert_eq!(render("kind is {.kind}", &d), "kind is List");
        assert_eq!(render("{.kind}", &d), "List");
        assert_eq!(render("{['kind']}", &d), "List");
        assert_eq!(render("{$.kind}", &d), "List");
        assert_eq!(render("{..name}", &d), "127.0.0.1 127.0.0.2 myself e2e");
        assert_eq!(render("{.items[*].metadata.name}", &d), "127.0.0.1 127.0.0.2");
        assert_eq!(render("{.users[0].name}", &d), "myself");
        assert_eq!(
            render("{.items[*]['metadata.name', 'status.capacity']}", &d),
            r#"127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}"#
        );
        assert_eq!(render("{.items[*].status.capacity}", &d), r#"{"cpu":"4"} {"cpu":"8"}"#);
        assert_eq!(render(r#"{.users[?(@.name=="e2e")].user.password}"#, &d), "secret");
        assert_eq!(
            render(r#"{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}"#, &d),
            r#"[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] "#
        );
        assert_eq!(render(r#"{range .items[*]}{.metadata.name}{"\t"}{end}"#, &d), "127.0.0.1\t127.0.0.2\t");
        assert_eq!(render("{.items[-1:].metadata.name}", &d), "127.0.0.2");
        assert_eq!(render(r#"{.items[0].metadata.labels.kubernetes\.io/hostname}"#, &d), "127.0.0.1");
        assert_eq!(render("{@}", &json!("x")), "x");
    }

    /// What aloft's users write: annotation keys with dots, dashes and slashes, conditions by
    /// type, ranges with text, numbers and booleans, slices and unions.
    #[test]
    fn the_paths_an_mco_user_writes() {
        let pool = json!({
            "metadata": {"name": "worker", "labels": {"pools.operator.machineconfiguration.openshift.io/worker": "w"}},
            "status": {"machineCount": 3, "updatedMachineCount": 2,
                "conditions": [{"type": "Updated", "status": "False"}, {"type": "Updating", "status": "True"}]},
        });
        assert_eq!(render(r#"{.status.conditions[?(@.type=="Updating")].status}"#, &pool), "True");
        assert_eq!(render(r#"{.status.conditions[?(@.status!='True')].type}"#, &pool), "Updated");
        assert_eq!(render("{.status.machineCount}/{.status.updatedMachineCount}", &pool), "3/2");
        assert_eq!(render("{.status.conditions[?(@.type)].type}", &pool), "Updated Updating");
        assert_eq!(render("{.status.conditions[*].type}", &pool), "Updated Updating");
        assert_eq!(render("{.status.conditions[0,1].status}", &pool), "False True");
        assert_eq!(render("{.status.conditions[0:2:2].type}", &pool), "Updated");
        assert_eq!(render("{.status.conditions[-1].type} {.status.conditions[0:-1].type}", &pool), "Updating Updated");
        assert_eq!(render("{.status.conditions[1:1].type}", &pool), "", "an empty range is nothing");
        assert_eq!(render("{.status.nothing.here}", &pool), "", "missing finds nothing, as kubectl's default");
        assert_eq!(
            render(r#"{.metadata.labels.pools\.operator\.machineconfiguration\.openshift\.io/worker}"#, &pool),
            "w"
        );
        let t = r#"{.metadata.labels['pools\.operator\.machineconfiguration\.openshift\.io/worker']}"#;
        assert_eq!(render(t, &pool), "w");
        // As kubectl's, a quoted name is a path: its dots must be escaped to be part of a key.
        assert_eq!(render("{.metadata.labels['pools.operator.machineconfiguration.openshift.io/worker']}", &pool), "");
        let list = json!({"items": [
            {"metadata": {"name": "a", "annotations": {"machineconfiguration.openshift.io/state": "Done"}}, "n": 1},
            {"metadata": {"name": "b", "annotations": {"machineconfiguration.openshift.io/state": "Working"}}, "n": 5},
        ]});
        let t = r#"{range .items[*]}{.metadata.name}={.metadata.annotations.machineconfiguration\.openshift\.io/state}{"\n"}{end}"#;
        assert_eq!(render(t, &list), "a=Done\nb=Working\n");
        assert_eq!(render("{.items[?(@.n>2)].metadata.name}", &list), "b");
        assert_eq!(render("{.items[?(@.n<=1)].metadata.name}", &list), "a");
        // A literal on the left, holding what reads as an operator.
        assert_eq!(render(r#"{.items[?("a==b"!=@.metadata.name)].n}"#, &list), "1 5");
        assert_eq!(render(r#"{.items[?('Working'==@.metadata.annotations.*)].n}"#, &list), "5");
        // `$` inside a range is the object printed, `@` and bare paths the element.
        assert_eq!(render("{range .items[*]}{$.items[0].n}{@.n}{end}", &list), "1115");
        // Nested ranges; a range over the array itself runs once, with the array.
        let t = "{range .items[*]}{.metadata.name}:{range .metadata.annotations.*}{@};{end}{end}";
        assert_eq!(render(t, &list), "a:Done;b:Working;");
        assert_eq!(render("{range .items}{.metadata.name};{end}", &list), ";");
        assert_eq!(render("{range .items}{[*].n};{end}", &list), "1 5;");
    }

    /// Where kubectl's execution fails, so does this, saying why: an index out of the array
    /// (no clamping), a range that runs backwards, an index or filter on what is no array.
    #[test]
    fn what_kubectl_cannot_execute_is_an_error() {
        let v = json!({"list": [1, 2], "obj": {"a": 1}, "none": null});
        for (t, want) in [
            ("{.list[5]}", "array index out of bounds: index 5, length 2"),
            ("{.list[-3]}", "array index out of bounds: index -1, length 2"),
            ("{.list[0:5]}", "array index out of bounds: index 4, length 2"),
            ("{.list[1:0]}", "starting index 1 is greater than ending index 0"),
            ("{.obj[0]}", "an object is not an array"),
            ("{.obj[?(@.a)]}", "an object is not an array and cannot be filtered"),
        ] {
            let err = Template::parse(t).unwrap().render(&v).unwrap_err().to_string();
            assert!(err.contains(want) && err.contains(&format!("error executing jsonpath {t:?}")), "{t}: {err}");
        }
        // Null is nothing to index (but no array to filter), and nothing found is nothing printed.
        assert_eq!(render("{.none[0]}{.none[*]}{.missing[3]}", &v), "");
        let err = Template::parse("{.none[?(@.a)]}").unwrap().render(&v).unwrap_err().to_string();
        assert!(err.contains("null is not an array and cannot be filtered"), "{err}");
        // `[*]` is every element of an array; an object's values are `.*`.
        let err = Template::parse("{.obj[*]}").unwrap().render(&v).unwrap_err().to_string();
        assert!(err.contains("an object is not an array"), "{err}");
        assert_eq!(render("{.obj.*}", &v), "1");
    }

    /// Bad templates are refused with what is wrong, before anything is asked of the server.
    #[test]
    fn bad_templates_say_what_is_wrong() {
        for (t, want) in [
            ("{.metadata.name", "unclosed action"),
            ("{end}", "{end} without a {range}"),
            ("{range .items[*]}{.x}", "{range} without an {end}"),
            ("{.items[}", "unclosed action"),
            ("{.items[0}]}", "\"0}\" is not an index"),
            ("{.items[abc]}", "\"abc\" is not an index or a quoted name"),
            ("{.items[1:2:0]}", "step must be > 0"),
            ("{.items[::-1]}", "step must be > 0"),
            (r#"{.items[?(@.a="b")]}"#, "unrecognized filter operator ="),
            ("{.items[?(@.a==)]}", "is neither a path"),
            ("{.items[?@.a]}", "a filter is `[?(...)]`"),
            ("{.a.}x{.b..}", ""),
            ("{\"unterminated}", "unclosed action"),
            ("{\"a\"b}", "text in an action is one quoted string"),
        ] {
            match Template::parse(t) {
                Err(e) => assert!(!want.is_empty() && e.to_string().contains(want), "{t}: {e}"),
                Ok(_) => assert!(want.is_empty(), "{t} parsed"),
            }
        }
    }

    #[test]
    fn custom_columns_take_relaxed_paths() {
        let v = json!({"metadata": {"name": "n1", "annotations": {"a.b/c": "x"}}, "list": [1, 2]});
        for e in ["metadata.name", ".metadata.name", "{.metadata.name}", "{metadata.name}"] {
            let t = Template::parse_relaxed(e).unwrap();
            assert_eq!((t.values(&v).unwrap(), t.text()), (vec!["n1".to_string()], "{.metadata.name}"), "{e}");
        }
        assert_eq!(Template::parse_relaxed(r"metadata.annotations.a\.b/c").unwrap().values(&v), Ok(vec!["x".into()]));
        assert_eq!(Template::parse_relaxed(".list[*]").unwrap().values(&v), Ok(vec!["1".into(), "2".into()]));
        assert_eq!(Template::parse_relaxed(".missing").unwrap().values(&v), Ok(vec![]));
    }

    proptest::proptest! {
        /// Whatever a user types, a template parses or is refused with a message naming it, and
        /// a parsed one renders or fails with one: never a panic (a slice past a multi-byte
        /// character, an index overflow, a step of zero).
        #[test]
        fn any_template_parses_or_is_refused_with_a_message(
            text in "[{}\\[\\]().*?@$:,'\"=!<>\\\\ a-z0-9é-]{0,24}"
        ) {
            check_any(&text)?;
        }

        /// The same, from pieces of real templates put together at random.
        #[test]
        fn any_template_of_pieces_parses_or_is_refused_with_a_message(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "{", "}", ".", "..", "items", "[*]", "[0]", "[-1]", "[7]", "[1:2]", "[::2]", "[-9:]", "[:99999999999]",
                "[?(@.name==\"e2e\")]", "[?(@.x)]", "[?(@.n<3)]", "['a','b']", "['metadata.name']", "{range .items[*]}",
                "{end}", "\\.", "é", "\"t\"", "$", "@", "metadata", "name", "users", "status", ",", " ",
            ]), 0..12)
        ) {
            check_any(&pieces.concat())?;
        }
    }

    /// What [`any_template_parses_or_is_refused_with_a_message`] checks of one text.
    fn check_any(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
        let doc = doc();
        for parsed in [Template::parse(text), Template::parse_relaxed(text)] {
            match parsed {
                Ok(t) => {
                    if let Err(e) = t.render(&doc) {
                        proptest::prop_assert!(!e.to_string().is_empty());
                    }
                    let _ = t.values(&doc);
                }
                Err(e) => proptest::prop_assert!(!e.to_string().is_empty(), "{text:?}"),
            }
        }
        Ok(())
    }

    /// `--allow-missing-template-keys=false`: a field found nowhere fails the template, naming
    /// it, where kubectl's default prints nothing; what is found prints as before.
    #[test]
    fn missing_keys_fail_when_asked() {
        let d = doc();
        let strict = |t: &str| Template::parse(t).unwrap().missing_keys_fail().render(&d);
        assert_eq!(strict("{.items[*].metadata.name}").unwrap(), "127.0.0.1 127.0.0.2");
        assert_eq!(strict("{range .items[*]}{.status.capacity.cpu};{end}").unwrap(), "4;8;");
        for (t, missing) in [
            ("{.items[*].metadata.nothing}", "nothing"),
            ("{.kind}{.spec}", "spec"),
            ("{range .items[*]}{.metadata.labels.x}{end}", "x"),
        ] {
            let err = strict(t).unwrap_err().to_string();
            assert!(err.contains(&format!("{missing} is not found")) && err.contains(t), "{t}: {err}");
            assert!(Template::parse(t).unwrap().render(&d).is_ok(), "{t} prints by default");
        }
        assert_eq!(strict(r#"{.items[?(@.metadata.name=="zzz")].metadata.name}"#).unwrap(), "");
        // A compared path inside a filter, and a quoted key, are paths too; an existence test is
        // not.
        let err = strict(r#"{.items[?(@.metadata.labels.kubernetes\.io/hostname=="x")].kind}"#).unwrap_err();
        assert!(err.to_string().contains("labels is not found"), "{err}");
        let err = strict("{.items[*]['metadata.nothing']}").unwrap_err();
        assert!(err.to_string().contains("nothing is not found"), "{err}");
        assert_eq!(strict("{.items[*]['metadata.name']}").unwrap(), "127.0.0.1 127.0.0.2");
        assert_eq!(strict("{.items[?(@.metadata.labels)].metadata.name}").unwrap(), "127.0.0.1");
    }

    /// A quote escaped inside a filter's quoted literal is part of the text, as in kubectl's
    /// parser: the literal does not end there, and the operator after it is still found.
    #[test]
    fn a_filters_literal_may_hold_an_escaped_quote() {
        let v = json!({"items": [{"n": "a", "note": "say \"hi\""}, {"n": "b", "note": "it's"}, {"n": "c", "note": "x==y"}]});
        assert_eq!(render(r#"{.items[?(@.note=="say \"hi\"")].n}"#, &v), "a");
        assert_eq!(render(r#"{.items[?(@.note!="say \"hi\"")].n}"#, &v), "b c");
        assert_eq!(render(r#"{.items[?(@.note=='it\'s')].n}"#, &v), "b");
        assert_eq!(render(r#"{.items[?("say \"hi\""==@.note)].n}"#, &v), "a");
        assert_eq!(render(r#"{.items[?(@.note=="x==y")].n}"#, &v), "c");
        // Left of the operator, the literal's escaped quote does not end it early (aloftctl's
        // reading: kubectl splits a filter at its first `=`, quoted or not, and fails here).
        let w = json!({"items": [{"n": "d", "note": "a\"==b"}]});
        assert_eq!(render(r#"{.items[?("a\"==b"==@.note)].n}"#, &w), "d");
    }

    /// Custom columns print what they find as Go's `%v` prints kubectl's decoded values.
    #[test]
    fn custom_columns_print_values_as_go_does() {
        let v = json!({"labels": {"z": "1", "a": "", "b/c": "x"}, "taints": [{"key": "k", "effect": "NoSchedule"}],
                       "cidrs": ["10.0.0.0/24", "10.0.1.0/24"], "port": 10250, "on": true, "none": null,
                       "nested": {"list": [1, {"x": null}], "empty": {}, "no": []}});
        let col = |p: &str| Template::parse_relaxed(p).unwrap().values(&v).unwrap().join(",");
        assert_eq!(col(".labels"), "map[a: b/c:x z:1]");
        assert_eq!(col(".taints"), "[map[effect:NoSchedule key:k]]");
        assert_eq!(col(".cidrs"), "[10.0.0.0/24 10.0.1.0/24]");
        assert_eq!(col(".cidrs[*]"), "10.0.0.0/24,10.0.1.0/24");
        assert_eq!((col(".port"), col(".on"), col(".none")), ("10250".into(), "true".into(), "<nil>".into()));
        assert_eq!(col(".nested"), "map[empty:map[] list:[1 map[x:<nil>]] no:[]]");
    }

    /// Go's shortest `%v` of a float64: exponents below 1e-4 and from 1e6, as Go prints them
    /// (`fmt.Println(1e6)` prints `1e+06`); integers as integers, as Kubernetes decodes them.
    #[test]
    fn numbers_print_as_go_prints_them() {
        let cases = [
            ("1.5", "1.5"),
            ("-2.25", "-2.25"),
            ("1.0", "1"),
            ("1000000.0", "1e+06"),
            ("999999.5", "999999.5"),
            ("1234567.0", "1.234567e+06"),
            ("608863452348.1149", "6.088634523481149e+11"),
            ("1000000", "1000000"),
            ("123456.789", "123456.789"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("-0.000012", "-1.2e-05"),
            ("1e20", "1e+20"),
            ("1e21", "1e+21"),
            ("1.25e22", "1.25e+22"),
            ("1e100", "1e+100"),
            ("0.1", "0.1"),
            ("0.0", "0"),
            ("-0.0", "-0"),
            ("42", "42"),
            ("-7", "-7"),
            ("9223372036854775807", "9223372036854775807"),
            ("18446744073709551615", "1.8446744073709552e+19"),
        ];
        for (json, go) in cases {
            let v: Value = serde_json::from_str(json).unwrap();
            assert_eq!(go_text(&v), go, "{json}");
            assert_eq!(text_of(&v), go, "{json}");
        }
    }

    #[test]
    fn sort_keys_order_as_kubectls() {
        let mut items = vec![
            json!({"n": "b", "count": 10}),
            json!({"n": "a", "count": 9}),
            json!({"n": "c"}),
            json!({"n": "a2", "count": 9.5}),
        ];
        let by = |e: &str, items: &mut Vec<Value>| {
            let t = Template::parse_relaxed(e).unwrap();
            items.sort_by(|a, b| sort_order(t.find(a).unwrap().first().copied(), t.find(b).unwrap().first().copied()));
            items.iter().map(|i| i["n"].as_str().unwrap().to_string()).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(by(".count", &mut items), "c a a2 b", "numbers by value (10 after 9.5), none first");
        assert_eq!(by("{.n}", &mut items), "a a2 b c");
        // Mixed kinds at one path still sort, in a total order: none, booleans, numbers, text.
        let mut mixed: Vec<Value> = ["x", "10.5", "b", "n", "a", "c"]
            .iter()
            .zip([json!("10.5"), json!(10), json!(true), json!(null), json!(9), json!("10")])
            .map(|(n, v)| json!({"n": n, "v": v}))
            .collect();
        mixed.push(json!({"n": "none"}));
        assert_eq!(by(".v", &mut mixed), "none b a 10.5 c x n");
    }
}
