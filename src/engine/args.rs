//! Reading the JSON arguments a model sends to a tool: lenient where models are sloppy
//! (`"12"` for 12, `"true"` for true). Shared by `tools` and `jobs`.

use serde_json::Value;

/// Read an optional string argument.
pub fn arg_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Read an optional non-negative integer argument (accepts `"12"` too; models do that).
pub fn arg_u64(args: &Value, key: &str) -> Option<u64> {
    match args.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Read an optional boolean argument (accepts `"true"`).
pub fn arg_bool(args: &Value, key: &str) -> Option<bool> {
    match args.get(key)? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Read a tool's arguments into its own struct. The error is one line the model can act
/// on, e.g. `terminal: missing field `command``.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(tool: &str, args: &Value) -> Result<T, String> {
    T::deserialize(args).map_err(|e| format!("{tool}: invalid arguments: {e}"))
}

/// Field deserialisers that accept what models send: `"12"` for 12, `"true"` for true.
pub(crate) mod lenient {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// An optional non-negative integer (a number or a numeric string).
    pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(v) => super::arg_u64(&serde_json::json!({ "v": v }), "v")
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("expected a non-negative integer, got {v}"))),
        }
    }

    /// An optional boolean (a bool or `"true"` / `"false"`).
    pub(crate) fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(v) => super::arg_bool(&serde_json::json!({ "v": v }), "v")
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("expected true or false, got {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Args {
        command: String,
        #[serde(default, deserialize_with = "lenient::opt_u64")]
        timeout: Option<u64>,
        #[serde(default, deserialize_with = "lenient::opt_bool")]
        background: Option<bool>,
    }

    #[test]
    fn arguments_parse_leniently_and_fail_readably() {
        let a: Args = parse("t", &json!({"command": "ls", "timeout": "12", "background": "true"})).unwrap();
        assert_eq!(a, Args { command: "ls".into(), timeout: Some(12), background: Some(true) });
        let a: Args = parse("t", &json!({"command": "ls", "extra": 1})).unwrap();
        assert_eq!(a, Args { command: "ls".into(), timeout: None, background: None });
        let e = parse::<Args>("t", &json!({"timeout": 3})).unwrap_err();
        assert_eq!(e, "t: invalid arguments: missing field `command`");
        let e = parse::<Args>("t", &json!({"command": 5})).unwrap_err();
        assert!(e.contains("invalid type: integer `5`, expected a string"), "{e}");
        let e = parse::<Args>("t", &json!({"command": "x", "timeout": "soon"})).unwrap_err();
        assert!(e.contains("expected a non-negative integer"), "{e}");
    }
}
