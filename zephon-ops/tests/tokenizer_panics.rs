//! A tokenizer's panic, caught as an error of its sample, is not printed;
//! other panics still are. Panic hooks are the process's, so the check runs
//! in a child process: this test binary again, running only this test.

use zephon_ops::tokenize::guarded_encode;

const CHILD: &str = "ZEPHON_TOKENIZER_PANICS_CHILD";

#[test]
fn a_caught_tokenizer_panic_is_not_printed_but_others_are() {
    if std::env::var_os(CHILD).is_some() {
        let e = guarded_encode::<u32>(|| panic!("a tokenizer panic: retry-limit-in-match"))
            .unwrap_err();
        assert_eq!(
            e,
            "the tokenizer failed on this text (a tokenizer panic: retry-limit-in-match)"
        );
        // The hook passes panics outside `guarded_encode` on, on every thread.
        let _ = std::panic::catch_unwind(|| panic!("a bug outside the tokenizer"));
        std::thread::spawn(|| {
            let _ = guarded_encode::<u32>(|| panic!("a tokenizer panic on another thread"));
            let _ = std::panic::catch_unwind(|| panic!("a bug on another thread"));
        })
        .join()
        .unwrap();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tokenizer_panics::a_caught_tokenizer_panic_is_not_printed_but_others_are",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test:\n{stdout}"
    );
    assert!(!stderr.contains("a tokenizer panic"), "{stderr}");
    assert!(stderr.contains("a bug outside the tokenizer"), "{stderr}");
    assert!(stderr.contains("a bug on another thread"), "{stderr}");
}
