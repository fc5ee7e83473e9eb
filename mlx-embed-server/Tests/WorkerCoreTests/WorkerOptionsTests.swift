import XCTest

@testable import WorkerCore

final class WorkerOptionsTests: XCTestCase {
    func testTheArgumentListServeGivesItsWorker() throws {
        // What `embed-stack serve` passes its warm worker (cmd/embed-stack/serve.go),
        // with the socket appended by backends.
        let o = try WorkerOptions.parse([
            "worker", "--model", "/models/qwen3", "--threads", "8", "--log-format", "text",
            "--log-level", "info", "--ctx", "8192", "--batch", "512", "--socket", "/tmp/es/w.sock",
        ])
        XCTAssertEqual(o.modelDir, "/models/qwen3")
        XCTAssertEqual(o.socketPath, "/tmp/es/w.sock")
        XCTAssertEqual(o.contextTokens, 8192)
        XCTAssertEqual(o.ignored, ["--threads", "--log-format", "--log-level", "--batch"])
        XCTAssertFalse(o.ignoreStdin)
        XCTAssertEqual(o.effectiveBuckets, [256, 1024, 8192])
    }

    func testFlagSpellingsAndBuckets() throws {
        let cases: [(args: [String], buckets: [Int], effective: [Int], ignoreStdin: Bool)] = [
            (["-model=/m", "-socket=/s"], [256, 1024, 8192], [256, 1024, 8192], false),
            (["--model", "/m", "--socket", "/s", "--buckets", "1024, 256,256"], [256, 1024], [256, 1024], false),
            (["--model=/m", "--socket=/s", "--ctx=300"], [256, 1024, 8192], [256, 300], false),
            (["--model=/m", "--socket=/s", "--ctx", "100"], [256, 1024, 8192], [100], false),
            (["--model=/m", "--socket=/s", "--ctx", "20000"], [256, 1024, 8192], [256, 1024, 8192, 20000], false),
            (["--model=/m", "--socket=/s", "--ctx", "1024"], [256, 1024, 8192], [256, 1024], false),
            (["--model=/m", "--socket=/s", "--ignore-stdin"], [256, 1024, 8192], [256, 1024, 8192], true),
            (["--model=/m", "--socket=/s", "--ignore-stdin=false"], [256, 1024, 8192], [256, 1024, 8192], false),
        ]
        for c in cases {
            let o = try WorkerOptions.parse(c.args)
            XCTAssertEqual(o.buckets, c.buckets, "\(c.args)")
            XCTAssertEqual(o.effectiveBuckets, c.effective, "\(c.args)")
            XCTAssertEqual(o.ignoreStdin, c.ignoreStdin, "\(c.args)")
        }
    }

    func testUsageErrors() {
        let cases: [(args: [String], message: String)] = [
            (["--model", "/m"], "--model and --socket are required"),
            (["--model", "/m", "--socket", "/s", "--fast"], "unknown flag --fast; see --help"),
            (["--model", "/m", "--socket", "/s", "extra"], "unexpected argument extra; see --help"),
            (["--model", "/m", "--socket"], "flag --socket needs a value"),
            (["--model", "/m", "--socket", "/s", "--ctx", "-1"], "--ctx -1: want a whole number of tokens, 0 or more"),
            (
                ["--model", "/m", "--socket", "/s", "--buckets", "256,0"],
                "--buckets 256,0: \"0\" is not a positive number of tokens"
            ),
            (["--model", "/m", "--socket", "/s", "--ignore-stdin=maybe"], "--ignore-stdin=maybe: want true or false"),
        ]
        for c in cases {
            XCTAssertThrowsError(try WorkerOptions.parse(c.args), "\(c.args)") { error in
                XCTAssertEqual(error as? UsageError, UsageError(c.message), "\(c.args)")
            }
        }
    }

    func testHelpNeedsNothingElse() throws {
        XCTAssertTrue(try WorkerOptions.parse(["--help"]).showHelp)
        XCTAssertTrue(try WorkerOptions.parse(["-h"]).showHelp)
    }
}
