//! The scalar half of a serde `Visitor` that builds a `serde_json::Value`: the two readers that
//! note repeated keys while they build one (JSON bodies in `server::fields`, YAML in `yaml`)
//! differ only in how they read maps and sequences.

/// `visit_bool` … `visit_none` for a visitor whose `Value` is `serde_json::Value`, each giving
/// what serde_json's own `Value` gives.
macro_rules! scalar_visits {
    () => {
        fn visit_bool<E>(self, v: bool) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_f64<E>(self, v: f64) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::from(v))
        }
        fn visit_str<E>(self, v: &str) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::String(v.to_string()))
        }
        fn visit_string<E>(self, v: String) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::String(v))
        }
        fn visit_unit<E>(self) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::Null)
        }
        fn visit_none<E>(self) -> Result<serde_json::Value, E> {
            Ok(serde_json::Value::Null)
        }
    };
}
pub(crate) use scalar_visits;
