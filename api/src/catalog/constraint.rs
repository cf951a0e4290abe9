//! `olm.constraint`: the dependency a bundle declares with a rule rather than a bare package or
//! API, as OLM v0's resolver reads it.
//!
//! A constraint is a predicate over one bundle: `gvk` (it provides the API), `package` (it is of
//! the package, at a version in the range), `cel` (a Common Expression Language rule over its
//! properties), or `all`, `any` and `not` of nested constraints, all of which apply to that same
//! bundle. The dependency is met when some installed bundle satisfies it, and OLM installs one
//! from a catalog when none does: aloft does the same ([`super::Dependency::Constraint`]).
//!
//! Read as OLM reads it: unknown fields anywhere refuse the whole constraint, a value over
//! 128 KiB is refused, the first kind in the order gvk, package, all, any, not (and its
//! deprecated spelling `none`), cel is the one used, and a constraint with none of them is of an
//! unknown type. A CEL rule sees `properties`, the bundle's properties as a list of
//! `{type, value}` maps, and `semver_compare(a, b)` (-1, 0 or 1, each side read as blang's
//! `ParseTolerant` reads a version); a rule must give a bool, and one that fails on a bundle
//! (a missing key, a value that is no version) is not met by it. Rules run on a thread of their
//! own with a deep stack and are limited to 8 KiB, so no rule a catalog carries can overflow a
//! coordinator thread's stack.

use std::collections::HashMap;
use std::sync::{mpsc, Mutex, OnceLock};

use serde_json::{Map, Value};

use super::model::{Bundle, Gvk, PROPERTY_BUNDLE_OBJECT, PROPERTY_CONSTRAINT, PROPERTY_CSV_METADATA};
use super::range::{parse_version_tolerant, Range};

/// The largest `olm.constraint` value OLM reads, in bytes of JSON (its `maxConstraintSize`).
pub const MAX_CONSTRAINT_SIZE: usize = 2 << 16;

/// One `olm.constraint`, read: what the bundle must satisfy and the message its author gave
/// for when nothing does.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// `failureMessage`; empty when not given.
    pub failure_message: String,
    pub rule: Rule,
}

/// What a constraint asks of one bundle.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// `gvk`: the bundle provides this API (`olm.gvk`).
    Api(Gvk),
    /// `package`: the bundle is of this package, at a version in the range.
    Package { name: String, range: Range },
    /// `all`: every nested constraint holds for the bundle (none given: always).
    All(Vec<Constraint>),
    /// `any`: at least one nested constraint holds (none given: never).
    Any(Vec<Constraint>),
    /// `not` (or the deprecated `none`): no nested constraint holds.
    Not(Vec<Constraint>),
    /// `cel`: the rule gives true for the bundle's properties.
    Cel(CelRule),
}

/// A CEL rule, checked to compile. Rules are compiled and run on one thread of their own
/// ([`cel_worker`]): the CEL parser and interpreter recurse once per level of an expression,
/// and a deeply nested rule from a catalog must not overflow the stack of the coordinator's
/// threads (it aborts the process). Rules are also limited to [`MAX_CEL_RULE_BYTES`], which
/// that thread's stack holds at any nesting.
#[derive(Debug, Clone, PartialEq)]
pub struct CelRule {
    text: String,
}

/// Property types a rule does not see: operator-registry's `convertModelPropertiesToAPIProperties`
/// drops them from what it serves OLM.
const HIDDEN_FROM_RULES: [&str; 2] = [PROPERTY_BUNDLE_OBJECT, PROPERTY_CSV_METADATA];

/// The longest CEL rule read. OLM sets no limit below the constraint's 128 KiB; real rules are
/// a line or two.
pub const MAX_CEL_RULE_BYTES: usize = 8 << 10;

/// The CEL thread's stack: a rule of [`MAX_CEL_RULE_BYTES`] nested as deep as it can be needs
/// ~80 MiB in a debug build (an unoptimized frame per level is tens of KiB). Only the pages
/// used are ever committed.
const CEL_STACK_BYTES: usize = 256 << 20;

/// Compiled programs kept by the CEL thread, by rule text; past this, it starts over.
const CEL_PROGRAMS_KEPT: usize = 256;

enum CelJob {
    Compile {
        text: String,
        reply: mpsc::Sender<Result<(), String>>,
    },
    /// One rule over many bundles' properties: a scan of a catalog is one job, not one hand-off
    /// to the CEL thread (two context switches) per bundle.
    Evaluate {
        text: String,
        each: Vec<Value>,
        reply: mpsc::Sender<Result<Vec<Result<bool, String>>, String>>,
    },
}

/// The thread that compiles and runs CEL rules, started on first use; `None` if it could not
/// be started (every rule then fails to compile, saying so).
fn cel_worker() -> Option<&'static Mutex<mpsc::Sender<CelJob>>> {
    static WORKER: OnceLock<Option<Mutex<mpsc::Sender<CelJob>>>> = OnceLock::new();
    WORKER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<CelJob>();
            std::thread::Builder::new()
                .name("cel".into())
                .stack_size(CEL_STACK_BYTES)
                .spawn(move || run_cel_jobs(rx))
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

fn run_cel_jobs(jobs: mpsc::Receiver<CelJob>) {
    let mut programs: HashMap<String, cel::Program> = HashMap::new();
    // Made once: a context holds CEL's standard library, which takes longer to build than a
    // typical rule takes to run. Each evaluation binds `properties` in a scope of its own.
    let mut root = cel::Context::default();
    let semver = root.add_function("semver_compare", semver_compare).map_err(|e| e.to_string());
    for job in jobs {
        // A panic in the CEL crate on some rule fails that job only.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job {
            CelJob::Compile { text, reply } => {
                let _ = reply.send(compiled(&mut programs, &text).map(|_| ()));
            }
            CelJob::Evaluate { text, each, reply } => {
                let answers = semver.clone().and_then(|()| compiled(&mut programs, &text)).map(|program| {
                    // A panic on one bundle's properties fails that bundle's answer only.
                    let one = |properties| {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(program, &root, properties)))
                            .unwrap_or_else(|_| Err("the CEL evaluator failed on this bundle".to_string()))
                    };
                    each.into_iter().map(one).collect()
                });
                let _ = reply.send(answers);
            }
        }));
    }
}

fn compiled<'a>(programs: &'a mut HashMap<String, cel::Program>, text: &str) -> Result<&'a cel::Program, String> {
    if !programs.contains_key(text) {
        let program = cel::Program::compile(text).map_err(|e| e.to_string().trim_end().to_string())?;
        super::cel_check::check(program.expression())?;
        if programs.len() >= CEL_PROGRAMS_KEPT {
            programs.clear();
        }
        programs.insert(text.to_string(), program);
    }
    programs.get(text).ok_or_else(|| "the compiled rule is gone".to_string())
}

fn run(program: &cel::Program, root: &cel::Context, properties: Value) -> Result<bool, String> {
    let mut context = root.new_inner_scope();
    context.add_variable("properties", properties).map_err(|e| e.to_string())?;
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("cel expression evaluated to {}, not bool", type_name(&other))),
        Err(e) => Err(e.to_string()),
    }
}

/// Hand `job` (made with its reply channel) to the CEL thread and wait for the answer.
fn ask<T>(job: impl FnOnce(mpsc::Sender<Result<T, String>>) -> CelJob) -> Result<T, String> {
    let worker = cel_worker().ok_or("the CEL evaluator could not be started")?;
    let (reply, answer) = mpsc::channel();
    worker
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(job(reply))
        .map_err(|_| "the CEL evaluator stopped".to_string())?;
    answer.recv().unwrap_or_else(|_| Err("the CEL evaluator failed on this rule".to_string()))
}

impl CelRule {
    /// Check that `text` compiles; the error is the parser's, with where in the rule it is.
    pub fn compile(text: &str) -> Result<CelRule, String> {
        if text.len() > MAX_CEL_RULE_BYTES {
            return Err(format!("the rule is {} bytes, longer than the {MAX_CEL_RULE_BYTES} read", text.len()));
        }
        ask(|reply| CelJob::Compile { text: text.to_string(), reply })?;
        Ok(CelRule { text: text.to_string() })
    }

    /// The rule's answer for `bundle`: an error when it fails on it or gives no bool.
    pub fn evaluate(&self, bundle: &Bundle) -> Result<bool, String> {
        self.evaluate_each(&[bundle]).pop().unwrap_or_else(|| Err("the CEL evaluator gave no answer".into()))
    }

    /// The rule's answer for each of `bundles`, in their order, run as one job.
    ///
    /// The rule sees the properties OLM's resolver sees: the catalog's gRPC API leaves out
    /// `olm.bundle.object` and `olm.csv.metadata` (the CSV, whole or its display fields), so a
    /// rule can never test them, and converting them (14 KiB a bundle in the community catalog)
    /// was most of an evaluation's cost.
    pub fn evaluate_each(&self, bundles: &[&Bundle]) -> Vec<Result<bool, String>> {
        if bundles.is_empty() {
            return Vec::new();
        }
        let each = bundles.iter().map(|b| rule_view(b)).collect();
        match ask(|reply| CelJob::Evaluate { text: self.text.clone(), each, reply }) {
            Ok(answers) if answers.len() == bundles.len() => answers,
            Ok(_) => vec![Err("the CEL evaluator gave too few answers".into()); bundles.len()],
            Err(e) => vec![Err(e); bundles.len()],
        }
    }
}

/// A bundle's properties as a rule sees them: a list of `{type, value}` maps, without the
/// types OLM does not serve.
fn rule_view(bundle: &Bundle) -> Value {
    let properties = bundle
        .properties
        .iter()
        .filter(|p| !HIDDEN_FROM_RULES.contains(&p.type_.as_str()))
        .map(|p| {
            let mut m = Map::new();
            m.insert("type".into(), Value::String(p.type_.clone()));
            m.insert("value".into(), p.value.clone().unwrap_or(Value::Null));
            Value::Object(m)
        })
        .collect();
    Value::Array(properties)
}

/// For each bundle asked about, whether one of `constraints` holds; each is asked only about
/// the bundles none before it held for.
fn any_holds(constraints: &[Constraint], bundles: &[&Bundle], asked: &[bool]) -> Vec<bool> {
    let mut held = vec![false; bundles.len()];
    let mut open = asked.to_vec();
    for c in constraints {
        for (i, h) in c.rule.holds(bundles, &open).into_iter().enumerate() {
            if h {
                held[i] = true;
                open[i] = false;
            }
        }
    }
    held
}

/// `semver_compare(a, b)`: blang's `Compare` of the two sides read tolerantly (build metadata
/// ignored), as OLM's CEL library defines it.
fn semver_compare(a: cel::Value, b: cel::Value) -> Result<i64, cel::ExecutionError> {
    let read = |v: &cel::Value| {
        let text = match v {
            cel::Value::String(s) => s.to_string(),
            cel::Value::Int(i) => i.to_string(),
            cel::Value::UInt(u) => u.to_string(),
            cel::Value::Float(f) => f.to_string(),
            other => format!("{other:?}"),
        };
        parse_version_tolerant(&text).map_err(|_| cel::ExecutionError::FunctionError {
            function: "semver_compare".into(),
            message: format!("unable to parse '{text}' to semver format"),
        })
    };
    Ok(read(&a)?.cmp_precedence(&read(&b)?) as i64)
}

fn type_name(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Null => "null",
        _ => "a value of another type",
    }
}

impl Constraint {
    /// Whether the constraint, or one nested in it, is a CEL rule.
    pub fn uses_cel(&self) -> bool {
        match &self.rule {
            Rule::Cel(_) => true,
            Rule::All(c) | Rule::Any(c) | Rule::Not(c) => c.iter().any(Constraint::uses_cel),
            Rule::Api(_) | Rule::Package { .. } => false,
        }
    }

    /// Read an `olm.constraint` property's value; the error says what is wrong and where
    /// (`all.constraints[1].package.versionRange`).
    pub fn parse(value: &Value) -> Result<Constraint, String> {
        let size = serde_json::to_vec(value).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_CONSTRAINT_SIZE {
            return Err(format!(
                "{PROPERTY_CONSTRAINT} value is greater than max constraint size {MAX_CONSTRAINT_SIZE} bytes"
            ));
        }
        read_constraint(value, "")
    }

    /// Whether `bundle` satisfies the constraint.
    pub fn met_by(&self, bundle: &Bundle) -> bool {
        self.rule.met_by(bundle)
    }

    /// Whether each of `bundles` satisfies the constraint, in their order: the same answers as
    /// [`Constraint::met_by`] on each, with every CEL rule run once over the bundles it is
    /// asked about (those an enclosing `all`, `any` or `not` has not decided already).
    pub fn met_by_each(&self, bundles: &[&Bundle]) -> Vec<bool> {
        self.rule.holds(bundles, &vec![true; bundles.len()])
    }
}

impl Rule {
    pub fn met_by(&self, bundle: &Bundle) -> bool {
        match self {
            Rule::Api(gvk) => bundle.provided_gvks().contains(gvk),
            Rule::Package { name, range } => of_package_in_range(bundle, name, range),
            Rule::All(cs) => cs.iter().all(|c| c.met_by(bundle)),
            Rule::Any(cs) => cs.iter().any(|c| c.met_by(bundle)),
            Rule::Not(cs) => !cs.iter().any(|c| c.met_by(bundle)),
            Rule::Cel(rule) => rule.evaluate(bundle).unwrap_or(false),
        }
    }

    /// For each bundle `asked` about, whether the rule holds (false where not asked).
    fn holds(&self, bundles: &[&Bundle], asked: &[bool]) -> Vec<bool> {
        let each = |f: &dyn Fn(&Bundle) -> bool| bundles.iter().zip(asked).map(|(b, a)| *a && f(b)).collect();
        match self {
            Rule::Api(gvk) => each(&|b| b.provided_gvks().contains(gvk)),
            Rule::Package { name, range } => each(&|b| of_package_in_range(b, name, range)),
            Rule::All(cs) => cs.iter().fold(asked.to_vec(), |holding, c| c.rule.holds(bundles, &holding)),
            Rule::Any(cs) => any_holds(cs, bundles, asked),
            Rule::Not(cs) => {
                let any = any_holds(cs, bundles, asked);
                asked.iter().zip(any).map(|(a, x)| *a && !x).collect()
            }
            Rule::Cel(rule) => {
                let picked: Vec<&Bundle> = bundles.iter().zip(asked).filter(|(_, a)| **a).map(|(b, _)| *b).collect();
                let mut answers = rule.evaluate_each(&picked).into_iter();
                asked.iter().map(|a| *a && answers.next().is_some_and(|r| r.unwrap_or(false))).collect()
            }
        }
    }

    /// The package every bundle satisfying the rule is of, when the rule says: a package
    /// rule's, one of `all`'s, or the one all of `any`'s alternatives name. Where a catalog
    /// must be searched for a bundle, only that package is.
    pub fn package(&self) -> Option<&str> {
        match self {
            Rule::Package { name, .. } => Some(name),
            Rule::All(cs) => cs.iter().find_map(|c| c.rule.package()),
            Rule::Any(cs) => {
                let first = cs.first()?.rule.package()?;
                cs.iter().all(|c| c.rule.package() == Some(first)).then_some(first)
            }
            Rule::Api(_) | Rule::Not(_) | Rule::Cel(_) => None,
        }
    }
}

/// Whether `bundle` is of package `name` at a version in `range`: what `olm.package.required`
/// and a constraint's `package` both ask.
pub(super) fn of_package_in_range(bundle: &Bundle, name: &str, range: &Range) -> bool {
    bundle.package_property().is_ok_and(|p| p.package_name == name)
        && bundle.version().is_some_and(|v| range.contains(&v))
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.failure_message.is_empty() {
            write!(f, "{}", self.rule)
        } else {
            write!(f, "{:?} ({})", self.failure_message, self.rule)
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |cs: &[Constraint]| cs.iter().map(|c| c.rule.to_string()).collect::<Vec<_>>().join(", ");
        match self {
            Rule::Api(g) => write!(f, "API {}/{} {}", g.group, g.version, g.kind),
            Rule::Package { name, range } => write!(f, "package {name:?} in range {:?}", range.as_str()),
            Rule::All(cs) => write!(f, "all of [{}]", list(cs)),
            Rule::Any(cs) => write!(f, "any of [{}]", list(cs)),
            Rule::Not(cs) => write!(f, "none of [{}]", list(cs)),
            Rule::Cel(rule) => write!(f, "CEL rule {:?}", rule.text),
        }
    }
}

const CONSTRAINT_FIELDS: &[&str] = &["failureMessage", "cel", "package", "gvk", "all", "any", "not", "none"];

fn at(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn object<'a>(value: &'a Value, path: &str, fields: &[&str]) -> Result<&'a Map<String, Value>, String> {
    let shown = if path.is_empty() { "the constraint" } else { path };
    let Value::Object(m) = value else { return Err(format!("{shown}: must be an object")) };
    if let Some(unknown) = m.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(format!("{shown}: unknown field {unknown:?} (known: {})", fields.join(", ")));
    }
    Ok(m)
}

fn string(m: &Map<String, Value>, path: &str, field: &str) -> Result<String, String> {
    match m.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{}: must be a string", at(path, field))),
    }
}

/// A field that is present and not null (Go's pointer fields take null as absent).
fn given<'a>(m: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    m.get(field).filter(|v| !v.is_null())
}

fn read_constraint(value: &Value, path: &str) -> Result<Constraint, String> {
    let m = object(value, path, CONSTRAINT_FIELDS)?;
    let failure_message = string(m, path, "failureMessage")?;
    // Every part is read (and refused when it does not read) whichever is used, as a strict
    // JSON decoding of the whole value does.
    let gvk = given(m, "gvk").map(|v| read_gvk(v, &at(path, "gvk"))).transpose()?;
    let package = given(m, "package").map(|v| read_package(v, &at(path, "package"))).transpose()?;
    let compound = |field: &str| given(m, field).map(|v| read_compound(v, &at(path, field))).transpose();
    let (all, any, not, none) = (compound("all")?, compound("any")?, compound("not")?, compound("none")?);
    let cel = given(m, "cel").map(|v| read_cel(v, &at(path, "cel"))).transpose()?;
    let rule = if let Some(g) = gvk {
        Rule::Api(g)
    } else if let Some(p) = package {
        p
    } else if let Some(cs) = all {
        Rule::All(cs)
    } else if let Some(cs) = any {
        Rule::Any(cs)
    } else if let Some(cs) = not.or(none) {
        Rule::Not(cs)
    } else if let Some(c) = cel {
        Rule::Cel(c)
    } else {
        let shown = if path.is_empty() { "the constraint" } else { path };
        return Err(format!("{shown}: unknown constraint type: give one of gvk, package, cel, all, any, not"));
    };
    Ok(Constraint { failure_message, rule })
}

fn read_gvk(value: &Value, path: &str) -> Result<Gvk, String> {
    let m = object(value, path, &["group", "version", "kind"])?;
    Ok(Gvk { group: string(m, path, "group")?, version: string(m, path, "version")?, kind: string(m, path, "kind")? })
}

fn read_package(value: &Value, path: &str) -> Result<Rule, String> {
    let m = object(value, path, &["packageName", "versionRange"])?;
    let name = string(m, path, "packageName")?;
    let text = string(m, path, "versionRange")?;
    let range =
        Range::parse(&text).map_err(|e| format!("{}: {text:?} does not read: {e}", at(path, "versionRange")))?;
    Ok(Rule::Package { name, range })
}

fn read_compound(value: &Value, path: &str) -> Result<Vec<Constraint>, String> {
    let m = object(value, path, &["constraints"])?;
    match given(m, "constraints") {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| read_constraint(v, &format!("{}[{i}]", at(path, "constraints"))))
            .collect(),
        Some(_) => Err(format!("{}: must be a list", at(path, "constraints"))),
    }
}

fn read_cel(value: &Value, path: &str) -> Result<CelRule, String> {
    let m = object(value, path, &["rule"])?;
    let text = string(m, path, "rule")?;
    if text.trim().is_empty() {
        return Err(format!("{}: an empty CEL rule", at(path, "rule")));
    }
    CelRule::compile(&text).map_err(|e| format!("{}: the CEL rule does not compile: {e}", at(path, "rule")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bundle(package: &str, version: &str, more: Value) -> Bundle {
        serde_json::from_value(crate::catalog::test_bundle(package, version, more)).expect("a bundle")
    }

    fn green() -> Value {
        json!({"type": "olm.gvk", "value": {"group": "greens.example.com", "version": "v1", "kind": "Green"}})
    }

    #[test]
    fn each_kind_reads_and_applies_to_one_bundle() {
        let blue_green = bundle("blue", "1.2.0", json!([green(), {"type": "certified", "value": true}]));
        let blue_old = bundle("blue", "0.9.0", json!([green()]));
        let red = bundle("red", "2.0.0", json!([]));
        let all = Constraint::parse(&json!({"failureMessage": "blue and Green for Red", "all": {"constraints": [
            {"failureMessage": "blue is needed", "package": {"packageName": "blue", "versionRange": ">=1.0.0"}},
            {"gvk": {"group": "greens.example.com", "version": "v1", "kind": "Green"}}]}}))
        .unwrap();
        assert!(all.met_by(&blue_green));
        assert!(!all.met_by(&blue_old), "out of range");
        assert!(!all.met_by(&red));
        assert_eq!(all.rule.package(), Some("blue"));
        assert_eq!(
            all.to_string(),
            r#""blue and Green for Red" (all of [package "blue" in range ">=1.0.0", API greens.example.com/v1 Green])"#
        );

        let any = Constraint::parse(&json!({"any": {"constraints": [
            {"package": {"packageName": "red", "versionRange": ">=2.0.0"}},
            {"gvk": {"group": "greens.example.com", "version": "v1", "kind": "Green"}}]}}))
        .unwrap();
        assert!(any.met_by(&red) && any.met_by(&blue_old));
        assert_eq!(any.rule.package(), None, "two kinds of bundle meet it");

        let not = Constraint::parse(&json!({"not": {"constraints": [{"package":
            {"packageName": "red", "versionRange": ">=0.0.0"}}]}}))
        .unwrap();
        assert!(!not.met_by(&red) && not.met_by(&blue_old));
        let deprecated = Constraint::parse(&json!({"none": {"constraints": [{"package":
            {"packageName": "red", "versionRange": ">=0.0.0"}}]}}))
        .unwrap();
        assert_eq!(deprecated.rule, not.rule, "none is the old spelling of not");

        let empty_all = Constraint::parse(&json!({"all": {}})).unwrap();
        let empty_any = Constraint::parse(&json!({"any": {"constraints": []}})).unwrap();
        assert!(empty_all.met_by(&red) && !empty_any.met_by(&red));

        // Only a CEL rule, at any depth, makes finding what meets a constraint costly.
        assert!(![&all, &any, &not, &empty_all].iter().any(|c| c.uses_cel()));
        let nested = Constraint::parse(&json!({"not": {"constraints": [{"any": {"constraints": [
            {"cel": {"rule": "properties.exists(p, p.type == 'certified')"}}]}}]}}))
        .unwrap();
        assert!(nested.uses_cel());
    }

    #[test]
    fn cel_rules_see_the_properties_and_compare_versions() {
        let certified = bundle("blue", "1.2.0", json!([{"type": "certified", "value": true}]));
        let plain = bundle("blue", "1.0.0", json!([]));
        let rule = |r: &str| Constraint::parse(&json!({"cel": {"rule": r}})).unwrap();
        let has = rule(r#"properties.exists(p, p.type == "certified")"#);
        assert!(has.met_by(&certified) && !has.met_by(&plain));
        let newer =
            rule(r#"properties.exists(p, p.type == "olm.package" && semver_compare(p.value.version, "v1.1") >= 0)"#);
        assert!(newer.met_by(&certified) && !newer.met_by(&plain), "1.2.0 >= v1.1 (read as 1.1.0), 1.0.0 is not");
        let Rule::Cel(c) = &rule(r#"semver_compare("1.0.0+build.1", "01.0") == 0"#).rule else { panic!() };
        assert_eq!(c.evaluate(&plain), Ok(true), "build metadata and leading zeroes do not count");
        let Rule::Cel(c) = &rule(r#"semver_compare("one", "1.0.0") == 0"#).rule else { panic!() };
        let err = c.evaluate(&plain).unwrap_err();
        assert!(err.contains("unable to parse 'one' to semver format"), "{err}");
        assert!(!rule(r#"semver_compare("one", "1.0.0") == 0"#).met_by(&plain), "a failing rule is not met");
        // A rule that gives no bool is refused when it is read, as OLM's type checker does ...
        let e = Constraint::parse(&json!({"cel": {"rule": "properties.size()"}})).unwrap_err();
        assert_eq!(
            e,
            "cel.rule: the CEL rule does not compile: the rule gives an int, not a bool (OLM: cel expressions must \
             have type Bool)"
        );
        // ... and one whose type only its run tells is not met when it gives no bool.
        let either = r#"size(properties) >= 0 ? "yes" : false"#;
        let Rule::Cel(c) = &rule(either).rule else { panic!() };
        assert_eq!(c.evaluate(&plain), Err("cel expression evaluated to string, not bool".to_string()));
        assert!(!rule(either).met_by(&plain));
    }

    #[test]
    fn a_constraint_over_many_bundles_answers_as_over_each() {
        let bundles = [
            bundle("blue", "1.2.0", json!([{"type": "certified", "value": true}, green()])),
            bundle("blue", "1.0.0", json!([])),
            bundle("red", "2.0.0", json!([{"type": "certified", "value": false}])),
            bundle("red", "0.9.0", json!([green()])),
        ];
        let refs: Vec<&Bundle> = bundles.iter().collect();
        let certified = json!({"cel": {"rule": r#"properties.exists(p, p.type == "certified" && p.value)"#}});
        let recent = json!({"cel": {"rule": r#"properties.exists(p, p.type == "olm.package" &&
            semver_compare(p.value.version, "1.1.0") >= 0)"#}});
        let failing = json!({"cel": {"rule": r#"properties.exists(p, p.type == "olm.package" &&
            semver_compare(p.value.packageName, "1.0.0") >= 0)"#}});
        let blue = json!({"package": {"packageName": "blue", "versionRange": ">=1.0.0"}});
        let api = json!({"gvk": {"group": "greens.example.com", "version": "v1", "kind": "Green"}});
        for (value, expected) in [
            (certified.clone(), [true, false, false, false]),
            (recent.clone(), [true, false, true, false]),
            (failing.clone(), [false; 4]),
            (json!({"all": {"constraints": [blue.clone(), recent.clone()]}}), [true, false, false, false]),
            (json!({"any": {"constraints": [api.clone(), recent.clone()]}}), [true, false, true, true]),
            (json!({"not": {"constraints": [certified.clone(), failing.clone()]}}), [false, true, true, true]),
            (
                json!({"all": {"constraints": [{"not": {"constraints": [blue]}}, {"any": {"constraints":
                [certified, api]}}]}}),
                [false, false, false, true],
            ),
            (json!({"all": {}}), [true; 4]),
            (json!({"any": {}}), [false; 4]),
        ] {
            let c = Constraint::parse(&value).unwrap_or_else(|e| panic!("{value}: {e}"));
            let one_by_one: Vec<bool> = refs.iter().map(|b| c.met_by(b)).collect();
            assert_eq!(one_by_one, expected, "{value}");
            assert_eq!(c.met_by_each(&refs), expected, "{value}, over all four at once");
        }
        let c = Constraint::parse(&recent).expect("reads");
        assert!(c.met_by_each(&[]).is_empty());
        let Rule::Cel(rule) = &Constraint::parse(&failing).expect("reads").rule else { panic!("a cel rule") };
        let answers = rule.evaluate_each(&refs[..2]);
        assert_eq!(answers.len(), 2);
        assert!(answers.iter().all(|a| a.as_ref().is_err_and(|e| e.contains("unable to parse 'blue'"))), "{answers:?}");
    }

    #[test]
    fn cel_rules_do_not_see_the_csv_as_olm_serves_bundles_without_it() {
        let csv = json!({"kind": "ClusterServiceVersion", "metadata": {"name": "blue.v1.0.0"}});
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, csv.to_string());
        let carrying = bundle(
            "blue",
            "1.0.0",
            json!([
                {"type": "olm.csv.metadata", "value": {"displayName": "Blue"}},
                {"type": "olm.bundle.object", "value": {"data": encoded}},
                {"type": "certified", "value": true}
            ]),
        );
        let count = |t: &str| {
            let r = format!(r#"properties.filter(p, p.type == "{t}").size() == 1"#);
            let Rule::Cel(c) = Constraint::parse(&json!({"cel": {"rule": r}})).expect("compiles").rule else {
                panic!("a cel rule")
            };
            c.evaluate(&carrying)
        };
        assert_eq!(count("certified"), Ok(true));
        assert_eq!(count("olm.package"), Ok(true));
        assert_eq!(count("olm.csv.metadata"), Ok(false));
        assert_eq!(count("olm.bundle.object"), Ok(false));
    }

    #[test]
    fn bad_constraints_are_refused_naming_the_field() {
        let err = |v: Value| Constraint::parse(&v).unwrap_err();
        assert_eq!(
            err(json!({"failureMessage": "x"})),
            "the constraint: unknown constraint type: give one of gvk, package, cel, all, any, not"
        );
        assert!(err(json!({"gvk": {"group": "g", "version": "v1", "kind": "K", "plural": "ks"}}))
            .starts_with(r#"gvk: unknown field "plural""#));
        assert!(err(json!({"package": {"packageName": "blue"}, "tags": []}))
            .starts_with(r#"the constraint: unknown field "tags""#));
        let e = err(json!({"all": {"constraints": [{"gvk": {"group": "g", "version": "v1", "kind": "K"}},
            {"package": {"packageName": "blue", "versionRange": "||"}}]}}));
        assert!(e.starts_with(r#"all.constraints[1].package.versionRange: "||" does not read"#), "{e}");
        let e = err(json!({"cel": {"rule": "properties.exists(p, "}}));
        assert!(e.starts_with("cel.rule: the CEL rule does not compile: "), "{e}");
        assert_eq!(err(json!({"cel": {"rule": " "}})), "cel.rule: an empty CEL rule");
        assert_eq!(err(json!({"any": {"constraints": {}}})), "any.constraints: must be a list");
        assert_eq!(err(json!("blue")), "the constraint: must be an object");
        let big = "x".repeat(MAX_CONSTRAINT_SIZE);
        assert_eq!(
            err(json!({"failureMessage": big, "gvk": {}})),
            "olm.constraint value is greater than max constraint size 131072 bytes"
        );
        // A part that is not used must read too; the first kind in OLM's order is the one used.
        assert!(err(json!({"gvk": {"group": "g", "version": "v1", "kind": "K"}, "cel": {"rule": "1 +"}}))
            .starts_with("cel.rule"));
        let both = Constraint::parse(&json!({"cel": {"rule": "true"},
            "package": {"packageName": "blue", "versionRange": ">=1.0.0"}}))
        .unwrap();
        assert_eq!(both.rule.package(), Some("blue"), "package comes before cel");
    }

    /// Rules nested as deep as the length limit allows compile or are refused, and run, on the
    /// CEL thread without taking the caller's stack (a debug build's test thread has 2 MiB); a
    /// longer rule is refused by its length.
    #[test]
    fn deeply_nested_rules_do_not_overflow_the_callers_stack() {
        let n = MAX_CEL_RULE_BYTES;
        let plain = bundle("blue", "1.0.0", json!([]));
        for rule in [
            format!("{}1{} == 1", "[".repeat(n / 2 - 4), "]".repeat(n / 2 - 4)),
            format!("{}1{} == 1", "(".repeat(n / 2 - 4), ")".repeat(n / 2 - 4)),
            format!("{}1 == 1", "1 + ".repeat(n / 4 - 2)),
            format!("{}true", "!".repeat(n - 4)),
            format!("{}true", "true ? true : ".repeat(n / 14 - 1)),
            format!("{}true{}", "properties.exists(p, ".repeat(n / 22), ")".repeat(n / 22)),
            format!("{}1 == 1", "-".repeat(n - 6)),
            format!("{}1{} == 1", "size(".repeat(n / 6 - 1), ")".repeat(n / 6 - 1)),
            format!("{}1{} == 1", "{1: ".repeat(n / 5 - 2), "}".repeat(n / 5 - 2)),
            format!("properties{} == 1", "[0]".repeat(n / 3 - 5)),
            format!("properties{} == 1", ".a".repeat(n / 2 - 10)),
        ] {
            assert!(rule.len() <= n, "{}", rule.len());
            // Refused by the parser, or run: either way an answer, not an abort.
            if let Ok(c) = Constraint::parse(&json!({"cel": {"rule": rule}})) {
                let Rule::Cel(r) = &c.rule else { panic!() };
                let _ = r.evaluate(&plain);
            }
        }
        let long = format!("{}true", " ".repeat(n));
        let e = Constraint::parse(&json!({"cel": {"rule": long}})).unwrap_err();
        assert_eq!(
            e,
            format!("cel.rule: the CEL rule does not compile: the rule is {} bytes, longer than the 8192 read", n + 4)
        );
    }

    #[test]
    fn tolerant_versions_read_as_blang_reads_them() {
        let v = |s: &str| parse_version_tolerant(s).map(|v| v.to_string());
        assert_eq!(v(" v1.2 ").as_deref(), Ok("1.2.0"));
        assert_eq!(v("1").as_deref(), Ok("1.0.0"));
        assert_eq!(v("01.002.0003-rc.1").as_deref(), Ok("1.2.3-rc.1"));
        assert_eq!(v("1.2-rc"), Err("Short version cannot contain PreRelease/Build meta data".to_string()));
        assert!(v("x.y").is_err());
    }
}
