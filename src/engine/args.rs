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
