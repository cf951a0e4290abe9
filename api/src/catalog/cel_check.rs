//! What OLM's CEL environment refuses when it compiles a constraint's rule, checked on the
//! parsed rule: a reference to a variable or function the environment does not declare, and a
//! rule whose type is not bool.
//!
//! Why: OLM compiles a rule with cel-go's type checker, over an environment that declares
//! `properties` (a list of maps) and `semver_compare` (two values to an int) besides the standard
//! library, and refuses a rule whose result type is not `bool` ("cel expressions must have type
//! Bool") or that names anything else ("undeclared reference to 'semver_compares'"). The `cel`
//! crate parses and runs rules but does not type-check them, so without this such a rule was
//! found only when it ran, and then it was simply not met by any bundle: a catalog author's
//! typo looked like a missing dependency.
//!
//! The check is an inference of the rule's type over the parsed expression, as strict as
//! cel-go's where it can tell (a literal, a comparison, a field of a map: `dyn`, which cel-go's
//! `ResultType() != Bool` refuses too) and lenient where it cannot (a conditional whose branches
//! differ): a rule OLM accepts is never refused here.

use cel::common::ast::{operators as op, Expr, IdedExpr, LiteralValue};

/// The variable OLM's environment declares: the bundle's properties, each `{type, value}`.
const PROPERTIES: &str = "properties";

/// The type names CEL's standard library declares as identifiers (`type(x) == list`).
const TYPE_NAMES: &[&str] = &["int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"];

/// The functions OLM's environment declares: cel-go's standard library (its operators, as the
/// parser names them, and its functions) and OLM's `semver_compare`.
const FUNCTIONS: &[&str] = &[
    op::CONDITIONAL,
    op::LOGICAL_AND,
    op::LOGICAL_OR,
    op::LOGICAL_NOT,
    op::SUBSTRACT,
    op::ADD,
    op::MULTIPLY,
    op::DIVIDE,
    op::MODULO,
    op::EQUALS,
    op::NOT_EQUALS,
    op::GREATER_EQUALS,
    op::LESS_EQUALS,
    op::GREATER,
    op::LESS,
    op::NEGATE,
    op::INDEX,
    op::IN,
    op::NOT_STRICTLY_FALSE,
    "size",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    "duration",
    "timestamp",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "semver_compare",
];

/// A rule's type, as far as the check can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    List,
    /// `properties` itself: a list whose elements are maps of string to any value, so an element
    /// is `dyn` to select from.
    Properties,
    Map,
    /// A type, a duration or a timestamp: none of them a bool.
    Other,
    /// A value whose type is known only when the rule runs (a field of a map, an element of a
    /// list): cel-go's `dyn`.
    Dyn,
    /// The check cannot tell: never refused.
    Unknown,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Bool => "bool",
            Type::Int => "an int",
            Type::Uint => "a uint",
            Type::Double => "a double",
            Type::String => "a string",
            Type::Bytes => "bytes",
            Type::Null => "null",
            Type::List | Type::Properties => "a list",
            Type::Map => "a map",
            Type::Other => "a type, duration or timestamp",
            Type::Dyn => "dyn (a value known only when it runs, such as a property's field)",
            Type::Unknown => "a type the check cannot tell",
        }
    }
}

/// Check a parsed rule as OLM's environment would: `Err` says what it refuses.
pub(super) fn check(rule: &IdedExpr) -> Result<(), String> {
    let mut scope: Vec<(String, Type)> = Vec::new();
    let mut undeclared: Vec<String> = Vec::new();
    let ty = type_of(rule, &mut scope, &mut undeclared);
    if !undeclared.is_empty() {
        let names: Vec<String> = undeclared.iter().map(|n| format!("'{n}'")).collect();
        return Err(format!(
            "undeclared reference to {} (OLM declares `properties`, `semver_compare` and CEL's standard library)",
            names.join(", ")
        ));
    }
    match ty {
        Type::Bool | Type::Unknown => Ok(()),
        other => Err(format!("the rule gives {}, not a bool (OLM: cel expressions must have type Bool)", other.name())),
    }
}

fn type_of(e: &IdedExpr, scope: &mut Vec<(String, Type)>, undeclared: &mut Vec<String>) -> Type {
    let note = |name: &str, undeclared: &mut Vec<String>| {
        if !undeclared.iter().any(|n| n == name) {
            undeclared.push(name.to_string());
        }
    };
    match &e.expr {
        Expr::Unspecified | Expr::Struct(_) => Type::Unknown,
        Expr::Literal(l) => match l {
            LiteralValue::Boolean(_) => Type::Bool,
            LiteralValue::Bytes(_) => Type::Bytes,
            LiteralValue::Double(_) => Type::Double,
            LiteralValue::Int(_) => Type::Int,
            LiteralValue::Null => Type::Null,
            LiteralValue::String(_) => Type::String,
            LiteralValue::UInt(_) => Type::Uint,
        },
        Expr::Ident(name) => {
            if let Some((_, t)) = scope.iter().rev().find(|(n, _)| n == name) {
                *t
            } else if name == PROPERTIES {
                Type::Properties
            } else if TYPE_NAMES.contains(&name.as_str()) {
                Type::Other
            } else {
                note(name, undeclared);
                Type::Unknown
            }
        }
        Expr::List(l) => {
            for x in &l.elements {
                type_of(x, scope, undeclared);
            }
            Type::List
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                    type_of(&me.key, scope, undeclared);
                    type_of(&me.value, scope, undeclared);
                }
            }
            Type::Map
        }
        Expr::Select(s) => {
            let operand = type_of(&s.operand, scope, undeclared);
            match (s.test, operand) {
                (true, _) => Type::Bool,
                // A field of a property (or of anything dyn) is dyn; a field of a map literal
                // has the type of its values, which the check does not follow.
                (false, Type::Dyn) => Type::Dyn,
                (false, _) => Type::Unknown,
            }
        }
        Expr::Comprehension(c) => {
            type_of(&c.iter_range, scope, undeclared);
            let accu = type_of(&c.accu_init, scope, undeclared);
            let depth = scope.len();
            scope.push((c.iter_var.clone(), Type::Dyn));
            if let Some(v) = &c.iter_var2 {
                scope.push((v.clone(), Type::Dyn));
            }
            scope.push((c.accu_var.clone(), accu));
            type_of(&c.loop_cond, scope, undeclared);
            type_of(&c.loop_step, scope, undeclared);
            let ty = type_of(&c.result, scope, undeclared);
            scope.truncate(depth);
            ty
        }
        Expr::Call(call) => {
            let target = call.target.as_ref().map(|t| type_of(t, scope, undeclared));
            let args: Vec<Type> = call.args.iter().map(|a| type_of(a, scope, undeclared)).collect();
            let name = call.func_name.as_str();
            if !FUNCTIONS.contains(&name) {
                note(name, undeclared);
                return Type::Unknown;
            }
            match name {
                op::LOGICAL_AND
                | op::LOGICAL_OR
                | op::LOGICAL_NOT
                | op::EQUALS
                | op::NOT_EQUALS
                | op::GREATER_EQUALS
                | op::LESS_EQUALS
                | op::GREATER
                | op::LESS
                | op::IN
                | op::NOT_STRICTLY_FALSE
                | "matches"
                | "contains"
                | "startsWith"
                | "endsWith"
                | "bool" => Type::Bool,
                op::ADD | op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO => {
                    let mut operands = target.into_iter().chain(args);
                    let first = operands.next().unwrap_or(Type::Unknown);
                    operands.fold(first, |a, b| match (a, b) {
                        (Type::Unknown, _) | (_, Type::Unknown) => Type::Unknown,
                        (a, b) if a == b => a,
                        _ => Type::Dyn,
                    })
                }
                op::NEGATE => match args.first().copied().unwrap_or(Type::Unknown) {
                    t @ (Type::Int | Type::Double | Type::Unknown) => t,
                    _ => Type::Dyn,
                },
                // An element of `properties`, or of anything dyn, is dyn; of a literal list or
                // map, the type of its elements, which the check does not follow.
                op::INDEX => match args.first() {
                    Some(Type::Properties | Type::Dyn) => Type::Dyn,
                    _ => Type::Unknown,
                },
                op::CONDITIONAL => match (args.get(1).copied(), args.get(2).copied()) {
                    (Some(a), Some(b)) if a == b => a,
                    _ => Type::Unknown,
                },
                "size" | "int" | "semver_compare" => Type::Int,
                "uint" => Type::Uint,
                "double" => Type::Double,
                "string" => Type::String,
                "bytes" => Type::Bytes,
                "dyn" => Type::Dyn,
                "type" | "duration" | "timestamp" => Type::Other,
                // The getters of a timestamp or duration.
                _ => Type::Int,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(rule: &str) -> Result<(), String> {
        check(cel::Program::compile(rule).expect("the rule parses").expression())
    }

    #[test]
    fn the_rules_olm_documents_and_accepts_pass() {
        for rule in [
            "properties.exists(p, p.type == 'certified' && p.value == true)",
            "properties.exists(p, p.type == 'olm.package' && semver_compare(p.value.version, '1.0.0') >= 0)",
            "properties.all(p, p.type != 'deprecated')",
            "properties.exists_one(p, p.type == 'olm.package')",
            "properties.exists(p, p.type == 'olm.test' && (semver_compare(p.value, '1.0.0') == 0))",
            "properties.exists(p, p.type == 'olm.maxOpenShiftVersion' && (semver_compare(p.value, 4.8) <= 0))",
            "has(properties[0].value) || size(properties) == 0",
            "!properties.exists(p, p.type == 'x')",
            "properties.filter(p, p.type == 'olm.gvk').size() > 1",
            "properties.map(p, p.type).exists(t, t.startsWith('olm.'))",
            "'a' in ['a', 'b']",
            "properties.size() > 0 ? true : false",
            "type(properties) == list && type(1) != string",
            "true",
            // What the check cannot tell is let through (cel-go types these two as bool).
            "size(properties) > 0 ? properties[0].value.flag : false",
            "{'a': true}['a'] && [true][0]",
            "{'a': true}.a",
        ] {
            assert_eq!(checked(rule), Ok(()), "{rule}");
        }
    }

    #[test]
    fn a_rule_that_gives_no_bool_is_refused_naming_its_type() {
        for (rule, gives) in [
            ("1", "an int"),
            ("semver_compare('1.0.0', '2.0.0')", "an int"),
            ("size(properties)", "an int"),
            ("'certified'", "a string"),
            ("properties", "a list"),
            ("properties.filter(p, p.type == 'x')", "a list"),
            ("{'a': true}", "a map"),
            ("1.5 * 2.0", "a double"),
            ("null", "null"),
            ("properties[0].value.certified", "dyn"),
            ("type(properties)", "a type"),
        ] {
            let e = checked(rule).expect_err(rule);
            assert!(e.starts_with(&format!("the rule gives {gives}")), "{rule}: {e}");
            assert!(e.ends_with("not a bool (OLM: cel expressions must have type Bool)"), "{e}");
        }
    }

    #[test]
    fn a_reference_olm_does_not_declare_is_refused_naming_it() {
        let e = checked("semver_compares(properties[0].value.version, '1.0.0') == 0").unwrap_err();
        assert!(e.starts_with("undeclared reference to 'semver_compares'"), "{e}");
        let e = checked("properties.exists(p, p.type == 'olm.test' && (doesnt_exist(p.value, '1.0.0') == 0))");
        assert!(e.unwrap_err().starts_with("undeclared reference to 'doesnt_exist'"));
        let e = checked("properties.exists(p, q.type == 'x') && bundle.name == 'a'").unwrap_err();
        assert!(e.starts_with("undeclared reference to 'q', 'bundle'"), "{e}");
        // A comprehension's variable is declared inside it only.
        let e = checked("properties.exists(p, true) && p.type == 'x'").unwrap_err();
        assert!(e.starts_with("undeclared reference to 'p'"), "{e}");
        // Functions of cel-go's extensions are not in OLM's environment.
        assert!(checked("properties.exists(p, p.type.lowerAscii() == 'x')").is_err());
    }
}
