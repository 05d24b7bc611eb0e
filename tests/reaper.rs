//! `talaria __reaper`: kills registered process groups when talaria's pipe closes
//! without "bye", and leaves them alone after "bye".

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use talaria::engine::jobs::group;

const DEADLINE: Duration = Duration::from_secs(10);

fn start_reaper(home: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_talaria"))
        .arg("__reaper")
        .env("TALARIA_HOME", home)
        .env("TALARIA_TEST_GUARD", "1")
        .stdin(Stdio::piped())
        .spawn()
        .expect("start the reaper")
}

/// `setsid sleep 300`: its own session and group (pgid = pid, since setsid(1) does not
/// fork when it is not a group leader).
fn start_orphan() -> Child {
    let child = Command::new("setsid").args(["sleep", "300"]).spawn().expect("start setsid sleep");
    let pgid = child.id() as i32;
    let start = Instant::now();
    while group::proc_stat(pgid).is_none_or(|s| s.pgrp != pgid) {
        assert!(start.elapsed() < DEADLINE, "setsid sleep never became a group leader");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(start.elapsed() < DEADLINE, "the reaper did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_closed_pipe_without_bye_kills_registered_groups() {
    let home = tempfile::tempdir().unwrap();
    let mut orphan = start_orphan();
    let pgid = orphan.id() as i32;
    let mut reaper = start_reaper(home.path());
    let mut stdin = reaper.stdin.take().unwrap();
    writeln!(stdin, "grace 0.5").unwrap();
    writeln!(stdin, "add {pgid}").unwrap();
    stdin.flush().unwrap();
    drop(stdin);
    let status = wait_exit(&mut reaper);
    assert!(status.success(), "{status:?}");
    let start = Instant::now();
    while group::group_alive(pgid) {
        assert!(start.elapsed() < DEADLINE, "group {pgid} outlived the reaper");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = orphan.wait();
}

#[test]
fn bye_leaves_groups_alone() {
    let home = tempfile::tempdir().unwrap();
    let mut orphan = start_orphan();
    let pgid = orphan.id() as i32;
    let mut reaper = start_reaper(home.path());
    let mut stdin = reaper.stdin.take().unwrap();
    writeln!(stdin, "add {pgid}").unwrap();
    writeln!(stdin, "bye").unwrap();
    drop(stdin);
    let status = wait_exit(&mut reaper);
    assert!(status.success(), "{status:?}");
    assert!(group::group_alive(pgid), "the reaper killed a group after bye");
    orphan.kill().unwrap();
    let _ = orphan.wait();
}

#[test]
fn a_deleted_group_is_not_killed() {
    let home = tempfile::tempdir().unwrap();
    let mut orphan = start_orphan();
    let pgid = orphan.id() as i32;
    let mut reaper = start_reaper(home.path());
    let mut stdin = reaper.stdin.take().unwrap();
    writeln!(stdin, "add {pgid}").unwrap();
    writeln!(stdin, "del {pgid}").unwrap();
    drop(stdin);
    wait_exit(&mut reaper);
    assert!(group::group_alive(pgid), "the reaper killed a group that was deleted");
    orphan.kill().unwrap();
    let _ = orphan.wait();
}
