//! Loading the hex fixtures in `testdata/` (written by `testdata/extract_events.py` from the captures).

use std::path::PathBuf;

pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata").join(rel)
}

fn hex_bytes(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits in {text:?}");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).expect("hex digit"))
        .collect()
}

/// An annotated fixture: one event, hex with `#` comments after each field.
#[allow(dead_code)] // each test file uses part of this module
pub fn annotated(name: &str) -> Vec<u8> {
    let path = testdata(&format!("annotated/{name}.hex"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let hex: String = text.lines().map(|line| line.split('#').next().unwrap_or("")).collect::<Vec<_>>().join(" ");
    hex_bytes(&hex)
}

/// A captured stream: each event as `(comment describing it, bytes)`.
pub fn captured(stem: &str) -> Vec<(String, Vec<u8>)> {
    let path = testdata(&format!("captured/{stem}.events.hex"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut comment = String::new();
    for line in text.lines() {
        if let Some(c) = line.strip_prefix('#') {
            comment = c.trim().to_owned();
        } else if !line.trim().is_empty() {
            out.push((comment.clone(), hex_bytes(line)));
        }
    }
    out
}

pub const CAPTURES: [&str; 2] = ["repl-handshake-and-stream", "repl-setup"];
