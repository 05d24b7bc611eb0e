//! The keystroke-to-screen driver the PTY benches share: `n` keystrokes of a character that
//! appears nowhere else on screen, each removed again with Backspace (drawn before the next
//! key, so the two never cancel out in one frame), ~25 keys/s. Latency = the write of the key
//! to the PTY → the first output chunk that carries the character. Included with `#[path]`
//! by benches that have the `pty` module (`tests/common/pty.rs`).

use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// The latencies of `n` keystrokes typed into `p`'s input box.
pub fn keystroke_latencies(p: &crate::pty::Pty, n: usize) -> Vec<Duration> {
    const KEY: char = 'ʬ';
    let mut key_bytes = [0u8; 4];
    let key_bytes = KEY.encode_utf8(&mut key_bytes).as_bytes().to_vec();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let offset = p.raw.lock().expect("raw").len();
        let sent = Instant::now();
        p.send(&key_bytes);
        loop {
            let seen = p.raw.lock().expect("raw")[offset..].windows(key_bytes.len()).any(|w| w == key_bytes.as_slice());
            if seen {
                times.push(sent.elapsed());
                break;
            }
            assert!(sent.elapsed() < DEADLINE, "the keystroke never reached the screen:\n{}", p.contents());
            std::thread::sleep(Duration::from_micros(100));
        }
        p.send(b"\x7f");
        let erased = Instant::now();
        while p.contents().contains(KEY) {
            assert!(erased.elapsed() < DEADLINE, "the Backspace never reached the screen");
            std::thread::sleep(Duration::from_micros(200));
        }
        // Pace the typing like a fast typist (~25 keys/s), so each key meets a busy screen.
        std::thread::sleep(Duration::from_millis(40));
    }
    times
}
