//! SKELETON — the files helper replaces this.
use async_trait::async_trait;
use serde_json::Value;

use super::{Concurrency, Tool, ToolCtx, ToolResult};

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
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
pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }
    fn description(&self) -> &'static str {
        ""
    }
    fn parameters(&self) -> Value {
        Value::Null
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Sequential
    }
    fn summary(&self, _args: &Value) -> String {
        String::new()
    }
    async fn call(&self, _args: Value, _ctx: ToolCtx) -> ToolResult {
        todo!()
    }
}
pub struct EditFile;

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }
    fn description(&self) -> &'static str {
        ""
    }
    fn parameters(&self) -> Value {
        Value::Null
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Sequential
    }
    fn summary(&self, _args: &Value) -> String {
        String::new()
    }
    async fn call(&self, _args: Value, _ctx: ToolCtx) -> ToolResult {
        todo!()
    }
}
