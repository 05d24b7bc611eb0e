//! SKELETON — the jobs helper replaces this.
use async_trait::async_trait;
use serde_json::Value;

use super::{Concurrency, Tool, ToolCtx, ToolResult};

pub struct ProcessTool;

#[async_trait]
impl Tool for ProcessTool {
    fn name(&self) -> &'static str {
        "process"
    }
    fn description(&self) -> &'static str {
        ""
    }
    fn parameters(&self) -> Value {
        Value::Null
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }
    fn summary(&self, _args: &Value) -> String {
        String::new()
    }
    async fn call(&self, _args: Value, _ctx: ToolCtx) -> ToolResult {
        todo!()
    }
}
