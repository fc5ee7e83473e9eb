import Foundation
import XCTest

@testable import WorkerCore

/// An engine whose vector for a sequence is [count, first id, 0.5]: exact in float32
/// and in its JSON text. Ids >= vocab are input errors; id 999 fails the engine; id 998
/// returns a NaN.
final class FakeEngine: EmbeddingEngine, @unchecked Sendable {
    let info = EngineInfo(nEmbd: 3, maxTokens: 4, maxBatchTokens: 8, model: "fake \"model\"")
    static let vocab: Int32 = 1000
    var lastTraceparent: String?? = .none

    func embed(_ seqs: [[Int32]], traceparent: String?, isCancelled: @escaping () -> Bool) throws -> [[Float]] {
        lastTraceparent = .some(traceparent)
        for (i, s) in seqs.enumerated() {
            if let j = s.firstIndex(where: { $0 >= Self.vocab }) {
                throw InputError(index: i, reason: "token \(j) is id \(s[j]), outside the vocabulary [0, \(Self.vocab))")
            }
        }
        if seqs.contains(where: { $0.contains(999) }) {
            struct Broken: Error, CustomStringConvertible { var description: String { "device lost" } }
            throw Broken()
        }
        if isCancelled() {
            throw CancelledError()
        }
        return seqs.map { s in [Float(s.count), Float(s[0]), s.contains(998) ? Float.nan : Float(0.5)] }
    }
}

func post(_ body: String, headers: [(name: String, value: String)] = []) -> HTTPRequest {
    HTTPRequest(method: "POST", target: "/embed", headers: headers, body: Array(body.utf8))
}

func text(_ r: HTTPResponse) -> String { String(decoding: r.body, as: UTF8.self) }

func header(_ r: HTTPResponse, _ name: String) -> String? {
    r.headers.first(where: { $0.name.lowercased() == name.lowercased() })?.value
}

final class WorkerHandlerTests: XCTestCase {
    func readyHandler() -> (WorkerHandler, FakeEngine) {
        let h = WorkerHandler(pid: 42)
        let e = FakeEngine()
        h.setReady(e)
        return (h, e)
    }

    func testHealthWhileLoadingAndReady() {
        let h = WorkerHandler(pid: 42)
        let loading = h.handle(HTTPRequest(method: "GET", target: "/health"), peerGone: { false })
        XCTAssertEqual(loading.status, 503)
        XCTAssertEqual(text(loading), "{\"status\":\"loading\",\"pid\":42}")
        XCTAssertEqual(header(loading, "Retry-After"), "1")

        let embedWhileLoading = h.handle(post("{\"tokens\":[[1]]}"), peerGone: { false })
        XCTAssertEqual(embedWhileLoading.status, 503)
        XCTAssertEqual(text(embedWhileLoading), "{\"error\":\"the worker is still loading its model\"}")

        h.setReady(FakeEngine())
        let ready = h.handle(HTTPRequest(method: "GET", target: "/health"), peerGone: { false })
        XCTAssertEqual(ready.status, 200)
        XCTAssertEqual(
            text(ready),
            "{\"status\":\"ready\",\"n_embd\":3,\"max_tokens\":4,\"max_batch_tokens\":8,\"model\":\"fake \\\"model\\\"\",\"pid\":42}"
        )
        XCTAssertEqual(header(ready, "Content-Type"), "application/json")
    }

    func testEmbedAnswersInInputOrder() throws {
        let (h, _) = readyHandler()
        let r = h.handle(post("{\"tokens\":[[7],[1,2,3],[5,6,7,8]]}"), peerGone: { false })
        XCTAssertEqual(r.status, 200, text(r))
        XCTAssertEqual(text(r), "{\"embeddings\":[[1.0,7.0,0.5],[3.0,1.0,0.5],[4.0,5.0,0.5]]}")
    }

    func testEmbeddingsTextParsesBackExactly() throws {
        let values: [Float] = [1e-05, -3.4028235e+38, 0.1, -0.0, 123456.79, 1.1754944e-38]
        let body = encodeEmbeddings([values])
        let parsed = try JSONSerialization.jsonObject(with: Data(body)) as? [String: [[Double]]]
        let back = try XCTUnwrap(parsed?["embeddings"]?.first).map { Float($0) }
        XCTAssertEqual(back, values)
    }

    func testRefusals() {
        let cases: [(name: String, body: String, status: Int, want: String)] = [
            ("empty list", "{\"tokens\":[]}", 400, "{\"error\":\"\\\"tokens\\\" is empty; send at least one sequence\"}"),
            ("empty sequence", "{\"tokens\":[[1],[]]}", 400, "{\"error\":\"the sequence is empty\",\"index\":1}"),
            (
                "too long", "{\"tokens\":[[1,2,3,4,5]]}", 400,
                "{\"error\":\"the sequence has 5 tokens; this worker accepts at most 4 (max_tokens)\",\"index\":0}"
            ),
            (
                "negative id", "{\"tokens\":[[1],[1,-2]]}", 400,
                "{\"error\":\"token 1 is id -2; ids are not negative\",\"index\":1}"
            ),
            (
                "missing tokens", "{}", 400,
                "{\"error\":\"\\\"tokens\\\" is missing; send {\\\"tokens\\\":[[id,...],...]}\"}"
            ),
            (
                "out of vocabulary", "{\"tokens\":[[1],[2,1000]]}", 400,
                "{\"error\":\"token 1 is id 1000, outside the vocabulary [0, 1000)\",\"index\":1}"
            ),
            ("engine failure", "{\"tokens\":[[999]]}", 500, "{\"error\":\"engine: device lost\"}"),
            ("NaN", "{\"tokens\":[[998]]}", 500, "{\"error\":\"engine: vector 0 holds nan at 2\"}"),
        ]
        let (h, _) = readyHandler()
        for c in cases {
            let r = h.handle(post(c.body), peerGone: { false })
            XCTAssertEqual(r.status, c.status, c.name)
            XCTAssertEqual(text(r), c.want, c.name)
        }
    }

    func testBodiesThatAreNotEmbedRequests() throws {
        let (h, _) = readyHandler()
        for body in ["x", "[[1]]", "{\"tokens\":[[1.5]]}", "{\"tokens\":[[1]]} trailing", "{\"tokens\":[[4294967296]]}"] {
            let r = h.handle(post(body), peerGone: { false })
            XCTAssertEqual(r.status, 400, body)
            let obj = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any], body)
            let message = try XCTUnwrap(obj["error"] as? String, body)
            XCTAssertTrue(
                message.hasPrefix("the body is not a JSON object {\"tokens\":[[id,...],...]}: "), "\(body): \(message)")
            XCTAssertNil(obj["index"], body)
        }
    }

    func testCallerGoneIsNotASuccess() {
        let (h, _) = readyHandler()
        let r = h.handle(post("{\"tokens\":[[1]]}"), peerGone: { true })
        XCTAssertEqual(r.status, 500)
        XCTAssertEqual(text(r), "{\"error\":\"engine: the caller has gone\"}")
    }

    func testRoutesAndMethods() {
        let (h, _) = readyHandler()
        let cases: [(method: String, target: String, status: Int, allow: String?, want: String)] = [
            ("GET", "/nope", 404, nil, "no such endpoint /nope; the worker serves GET /health and POST /embed"),
            ("POST", "/health", 405, "GET, HEAD", "POST /health is not allowed; use GET"),
            ("GET", "/embed", 405, "POST", "GET /embed is not allowed; use POST"),
        ]
        for c in cases {
            let r = h.handle(HTTPRequest(method: c.method, target: c.target), peerGone: { false })
            XCTAssertEqual(r.status, c.status, c.target)
            XCTAssertEqual(header(r, "Allow"), c.allow, c.target)
            XCTAssertEqual(text(r), "{\"error\":\(jsonString(c.want))}", c.target)
        }
        XCTAssertEqual(h.handle(HTTPRequest(method: "HEAD", target: "/health"), peerGone: { false }).status, 200)
    }

    func testTraceparentReachesTheEngineOnlyWhenValid() {
        let (h, e) = readyHandler()
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        _ = h.handle(post("{\"tokens\":[[1]]}", headers: [(name: "traceparent", value: valid)]), peerGone: { false })
        XCTAssertEqual(e.lastTraceparent, .some(valid))
        _ = h.handle(post("{\"tokens\":[[1]]}", headers: [(name: "Traceparent", value: "garbage")]), peerGone: { false })
        XCTAssertEqual(e.lastTraceparent, .some(nil))
    }

    func testValidTraceparent() {
        let cases: [(String, Bool)] = [
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true),
            ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false),
            ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false),
            ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", false),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false),
            ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false),
            ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false),
            ("", false),
        ]
        for (v, want) in cases {
            XCTAssertEqual(validTraceparent(v), want, v)
        }
    }

    func testLogLineQuoting() {
        var lines: [String] = []
        let log = WorkerLog(write: { lines.append($0) })
        log.info("worker ready", ["model": "Qwen3-Embedding-0.6B", "path": "/a b", "empty": ""])
        XCTAssertEqual(lines.count, 1)
        let line = lines[0]
        XCTAssertTrue(line.hasPrefix("time="), line)
        XCTAssertTrue(
            line.hasSuffix(" level=INFO msg=\"worker ready\" model=Qwen3-Embedding-0.6B path=\"/a b\" empty=\"\"\n"),
            line)
    }
}
