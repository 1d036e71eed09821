//! The commands of the `zephon` binary, as a library: the binary is a thin
//! `main` over them, and the benchmark binary (`zephon-bench`) reuses the
//! flag parsers and `prepare` from here.

pub mod cmd;

/// What both binaries do first: a closed pipe ends the process quietly,
/// and warnings go to stderr (`RUST_LOG` chooses more or less).
pub fn start_process() {
    // A closed pipe (`zephon inspect DIR -n 1000 | head`) ends the process
    // quietly, as it ends a shell tool: Rust ignores SIGPIPE, and the next
    // print after the reader left panicked with a backtrace.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread starts; SIG_DFL
    // is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing_subscriber::filter::LevelFilter::WARN.into())
                .from_env_lossy(),
        )
        .init();
}

/// The exit code of a command's result; an error is printed on stderr
/// with each of its causes once.
pub fn finish(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn chain_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if !text.contains(&t) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&t);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_is_printed_once() {
        let io = std::io::Error::other("disk full");
        let e = anyhow::Error::new(zephon_core::Error::Io {
            path: "/tmp".into(),
            source: io,
        })
        .context("opening dataset `d`");
        assert_eq!(
            super::chain_text(&e),
            "opening dataset `d`: I/O error on `/tmp`: disk full"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::chain_text(&plain), "outer: inner");
    }
}
