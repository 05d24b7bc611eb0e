//! Rewind snapshot cost (issue #29): a generated 10,000-file, 200 MB workspace in a temp dir;
//! the first snapshot, the next after 10 files changed, the store after 100 turns, and
//! `git stash create` on the same tree. `cargo run --release --example rewind_bench`
use std::time::Instant;

fn main() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let w = work.path();
    let init = std::process::Command::new("git").args(["init", "-q"]).current_dir(w).status().unwrap();
    assert!(init.success());
    for i in 0..10_000u32 {
        let dir = w.join(format!("d{}", i % 100));
        std::fs::create_dir_all(&dir).unwrap();
        // ~20 KB each, distinct content.
        let line = format!("file {i} line of text for the benchmark\n");
        std::fs::write(dir.join(format!("f{i}.txt")), line.repeat(20_000 / line.len())).unwrap();
    }
    let ws = talaria::engine::rewind::Workspace::open(data.path(), w, 10 << 20).unwrap();
    let t = Instant::now();
    ws.store.snapshot().unwrap();
    println!("first snapshot: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
    let mut next = Vec::new();
    for turn in 0..100u32 {
        for k in 0..10u32 {
            let i = (turn * 37 + k * 101) % 10_000;
            std::fs::write(w.join(format!("d{}/f{i}.txt", i % 100)), format!("turn {turn} changed {k}\n")).unwrap();
        }
        let t = Instant::now();
        ws.store.snapshot().unwrap();
        next.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    next.sort_by(f64::total_cmp);
    println!("next snapshot after 10 changed files: median {:.1} ms, max {:.1} ms (100 turns)", next[50], next[99]);
    println!("store after 100 turns: {:.1} MB", ws.store.disk_bytes() as f64 / 1e6);
    std::process::Command::new("git").args(["add", "-A"]).current_dir(w).status().unwrap();
    let t = Instant::now();
    std::process::Command::new("git").args(["stash", "create"]).current_dir(w).output().unwrap();
    println!("git stash create (user's repo, everything staged): {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
}
