//! Cost of persisting one message (append_message awaited) and of loading a
//! 10,000-message session.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use talaria::engine::llm::ToolCall;
use talaria::engine::store::{Store, StoredMessage};

fn message(i: usize) -> StoredMessage {
    let (role, tool_calls, tool_call_id) = match i % 3 {
        0 => ("user", Vec::new(), None),
        1 => ("assistant", vec![ToolCall::new(format!("c{i}"), "terminal", "{\"command\":\"cargo test\"}")], None),
        _ => ("tool", Vec::new(), Some(format!("c{}", i - 1))),
    };
    StoredMessage {
        role: role.into(),
        content: Some(format!("message {i}: {}", "some ordinary words of a conversation ".repeat(8))),
        tool_calls,
        tool_call_id,
        tool_name: None,
        display_kind: None,
    }
}

fn bench_store(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let store = Store::open(&dir.path().join("state.db")).expect("open store");

    let sid = rt.block_on(store.create_session("bench", "/bench", None)).expect("session");
    let mut i = 0;
    c.bench_function("append_message (awaited)", |b| {
        b.iter(|| {
            i += 1;
            rt.block_on(store.append_message(&sid, message(i))).expect("append")
        })
    });

    let big = rt.block_on(store.create_session("bench", "/bench", None)).expect("session");
    rt.block_on(async {
        for i in 0..10_000 {
            store.append_message(&big, message(i)).await.expect("append");
        }
    });
    c.bench_function("load_messages (10,000)", |b| {
        b.iter(|| {
            let loaded = rt.block_on(store.load_messages(&big)).expect("load");
            assert_eq!(loaded.len(), 10_000);
            black_box(loaded)
        })
    });
}

criterion_group!(benches, bench_store);
criterion_main!(benches);
