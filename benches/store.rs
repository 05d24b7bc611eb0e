//! Cost of persisting one message (append_message awaited) and of loading a
//! 10,000-message session.

mod common;

use common::*;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use talaria::engine::store::Store;

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
