//! Helpers shared by the CLI tests: run the `redlite` binary.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn redlite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redlite"))
        .args(args)
        .output()
        .expect("run redlite")
}

/// Assert success; returns (stdout, stderr).
pub fn ok(out: &Output) -> (String, String) {
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "failed:\nstdout: {so}\nstderr: {se}");
    (so, se)
}
