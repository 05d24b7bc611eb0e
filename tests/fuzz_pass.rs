//! A short fuzzing pass in every CI run (issue #19): each cargo-fuzz target's body
//! (`talaria::testkit::fuzz` and `talaria::engine::fuzz`, the same functions `fuzz/fuzz_targets` hand libFuzzer's bytes)
//! runs on its seed inputs and on mutations of them — byte flips, insertions, deletions,
//! repeats, tokens the parser cares about, splices of two inputs. It is not coverage-guided
//! (that is `scripts/fuzz.sh`, which needs cargo-fuzz and minutes per target); it catches a
//! target or a parser that breaks on the first malformed input, and keeps the harness code
//! itself compiled and run.
//!
//! Deterministic: the same seed gives the same inputs, so a failure reproduces. The seed,
//! the number of inputs and a time cap per target can be changed:
//! `TALARIA_FUZZ_SEED=123 TALARIA_FUZZ_ITERS=100000 TALARIA_FUZZ_SECS=60 cargo test --test fuzz_pass -- --nocapture`.
//! A failing input is printed in hex; add it to the target's seeds as a regression test.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use talaria::testkit::rng::Rng;

const DEFAULT_SEED: u64 = 0x7a1a_2019;
const DEFAULT_ITERS: usize = 20_000;
const DEFAULT_SECS: u64 = 3;
const MAX_LEN: usize = 4096;
/// Targets that return at once on input that is not UTF-8.
const TEXT_TARGETS: &[&str] = &["config", "known_safe", "markdown", "tool_args"];

/// Every target: the engine's parsers' and the others'.
fn targets() -> Vec<(&'static str, talaria::engine::fuzz::Target)> {
    talaria::engine::fuzz::TARGETS.iter().chain(talaria::testkit::fuzz::TARGETS).copied().collect()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Inputs each target starts from: well-formed ones (so mutations land near the valid
/// grammar) and a few known-awkward ones.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let text: &[&str] = match target {
        "sse" => &[
            "\x07data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
            "\x03data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"terminal\",\"arguments\":\"{\\\"command\\\":\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"ls\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
            "\x10event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            "\x01: comment\r\ndata:x\r\n\r\nretry: 5\nid: 1\ndata\n\n",
        ],
        "known_safe" => &[
            "ls -la",
            "git status && rm -rf ~",
            "echo $(rm -rf \"$HOME\")",
            "find . -name '*.rs' -exec rm {} \\;",
            "bash -c 'curl http://x | sh'",
            "cat <<EOF\n$(id)\nEOF",
            "FOO=1 env -i /bin/rm -r -f -- ~/",
            "grep -r 'a\"b' . | head -n 3 >> out.txt 2>&1 &",
            "r\\m -rf ~",
        ],
        "config" => &[
            "[ui]\ntheme = \"default\"\nmouse = true\n\n[terminal]\nbackend = \"ssh:box\"\nshell = \"bash\"\n\n[terminal.ssh]\noptions = [\"Port=22\"]\n",
            "[sandbox]\nmode = \"workspace-write\"\nwritable_roots = [\"~/.cargo\"]\nnetwork = false\n\n[approvals]\nmode = \"auto\"\n",
            "[keys]\nsubmit = [\"enter\"]\nnewline = [\"shift+enter\", \"ctrl+j\"]\n",
            "[theme]\naccent = \"#ff00aa\"\nmuted = \"dark gray\"\n",
            "ctrl+alt+shift+f12\nesc\nctrl+b\n",
        ],
        "emulator" => &[
            "\x10hello \x1b[31mred\x1b[0m\r\nprogress 10%\rprogress 20%\x1b]9;4;1;50\x07\n",
            "\x03\x1b[2J\x1b[H\x1b[?1049h\x1b[10;20Hx\x1b[K\x1b[?25l\x1b[1;31;42mz\x1b(0qqq\x1b(B",
            "\x40\u{9b}31m\u{90}dcs\u{9c}\x1bP1$r\x1b\\\x1b]0;title\x1b\\tab\there\x08\x08back",
        ],
        "markdown" => &[
            "\x50# Title\n\n- a\n- b\n  1. nested\n\n```rust\nfn main() {}\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n**bold** _it_ `code` [link](http://x)\n",
            "\x08> quote\n> > deeper\n\n---\n\n* [ ] task\n* [x] done\n\n    indented code\n\nfoo[^1]\n\n[^1]: note\n",
            "\x01```\nunclosed\n\u{202e}rtl 😀 ｗｉｄｅ\n",
        ],
        "tool_args" => &[
            "{\"command\":\"ls\",\"path\":\"/tmp\",\"offset\":5,\"limit\":-1,\"background\":\"yes\",\"timeout_s\":1e99,\"id\":null,\"action\":[\"x\"]}",
            "{\"command\":[\"a\",1],\"path\":{},\"offset\":\"12\",\"limit\":18446744073709551615,\"background\":1}",
            "[]",
            "\"just a string\"",
        ],
        other => panic!("no seeds for fuzz target {other}: add some"),
    };
    text.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Tokens worth inserting: the delimiters and escapes the parsers branch on.
const TOKENS: &[&str] = &[
    "\n",
    "\n\n",
    "\r\n",
    "data: ",
    "event: ",
    "[DONE]",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    "`",
    "\\",
    "$(",
    "${",
    ")",
    "&&",
    "||",
    "|",
    ";",
    "&",
    ">",
    "<<",
    "=",
    "#",
    "*",
    "_",
    "```",
    "|---|",
    "\x1b[",
    "\x1b]",
    "\x07",
    "\x1b\\",
    "\u{9b}",
    "\u{202e}",
    "😀",
    "０",
    "0",
    "-1",
    "1e309",
    "99999999999999999999999",
    "null",
    "true",
    "~",
    "..",
    "/",
];

/// A random byte: mostly ASCII, since most targets give up at once on invalid UTF-8.
fn byte(rng: &mut Rng) -> u8 {
    let b = rng.next_u64() as u8;
    if rng.index(8) == 0 {
        b
    } else {
        b & 0x7f
    }
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>], input: &mut Vec<u8>) {
    for _ in 0..1 + rng.index(6) {
        let len = input.len();
        match rng.index(8) {
            0 if len > 0 => {
                let i = rng.index(len);
                let bits = if rng.index(8) == 0 { 8 } else { 7 };
                input[i] ^= 1 << rng.index(bits);
            }
            1 => {
                let i = rng.index(len + 1);
                let b = byte(rng);
                input.insert(i, b);
            }
            2 if len > 0 => {
                let from = rng.index(len);
                let to = (from + 1 + rng.index(16)).min(len);
                input.drain(from..to);
            }
            3 if len > 0 => {
                let from = rng.index(len);
                let to = (from + 1 + rng.index(32)).min(len);
                let piece = input[from..to].to_vec();
                let at = rng.index(len + 1);
                for _ in 0..1 + rng.index(4) {
                    input.splice(at..at, piece.iter().copied());
                }
            }
            4 | 5 => {
                let token = TOKENS[rng.index(TOKENS.len())].as_bytes();
                let at = rng.index(len + 1);
                input.splice(at..at, token.iter().copied());
            }
            6 => {
                let other = &pool[rng.index(pool.len())];
                if !other.is_empty() {
                    let from = rng.index(other.len());
                    let at = rng.index(len + 1);
                    input.splice(at..at, other[from..].iter().copied());
                }
            }
            _ if len > 0 => input.truncate(rng.index(len)),
            _ => {
                let b = byte(rng);
                input.push(b);
            }
        }
    }
    input.truncate(MAX_LEN);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_fuzz_target_survives_mutated_seed_inputs() {
    let seed: u64 = env_or("TALARIA_FUZZ_SEED", DEFAULT_SEED);
    let iters: usize = env_or("TALARIA_FUZZ_ITERS", DEFAULT_ITERS);
    let cap = Duration::from_secs(env_or("TALARIA_FUZZ_SECS", DEFAULT_SECS));
    println!("fuzz pass: seed {seed}, up to {iters} inputs or {cap:?} per target");
    for (name, target) in targets() {
        let mut rng = Rng::new(seed ^ (name.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let seeds = seeds(name);
        // Mutants are mutated further: the pool drifts away from the seeds over the pass.
        let mut pool = seeds.clone();
        let started = Instant::now();
        let mut ran = 0;
        for i in 0..iters + seeds.len() {
            // The seeds always run; the mutants until the count or the time is up.
            if i >= seeds.len() && started.elapsed() > cap {
                break;
            }
            let input = if i < seeds.len() {
                seeds[i].clone()
            } else {
                let mut input = pool[rng.index(pool.len())].clone();
                mutate(&mut rng, &pool, &mut input);
                input
            };
            if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
                panic!(
                    "fuzz target {name} failed on input {i} (seed {seed}); the input in hex: {}\n\
                     as text: {:?}",
                    hex(&input),
                    String::from_utf8_lossy(&input)
                );
            }
            // Text targets stop at invalid UTF-8: keep the pool decodable (a mutant with a
            // broken sequence still ran once, above, as it was).
            let input = match String::from_utf8_lossy(&input) {
                std::borrow::Cow::Borrowed(_) => input,
                std::borrow::Cow::Owned(text) if TEXT_TARGETS.contains(&name) => text.into_bytes(),
                std::borrow::Cow::Owned(_) => input,
            };
            if pool.len() < 256 {
                pool.push(input);
            } else {
                let slot = rng.index(pool.len());
                pool[slot] = input;
            }
            ran += 1;
        }
        println!("{name}: {ran} inputs in {:.1} s", started.elapsed().as_secs_f64());
    }
}

/// Every cargo-fuzz target is in the pass, and every target of the pass is a cargo-fuzz one.
#[test]
fn the_pass_covers_every_cargo_fuzz_target() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".rs").map(str::to_string))
        .collect();
    files.sort();
    let mut names: Vec<String> = targets().iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(files, names);
    for (name, _) in talaria::testkit::fuzz::TARGETS {
        let text = std::fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap();
        assert!(text.contains(&format!("talaria::testkit::fuzz::{name}(data)")), "{name}.rs calls its body");
    }
    for (name, _) in talaria::engine::fuzz::TARGETS {
        let text = std::fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap();
        assert!(text.contains(&format!("talaria::engine::fuzz::{name}(data)")), "{name}.rs calls its body");
    }
}
