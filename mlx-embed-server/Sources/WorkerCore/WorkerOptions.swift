import Foundation

/// A command line that cannot be run; main prints it and exits 2.
public struct UsageError: Error, CustomStringConvertible, Equatable {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// The command line of mlx-embed-server.
///
/// It takes the flags of `embed-stack worker`, so that `embed-stack serve` can start
/// either worker with one argument list: the ones that mean something here (--model,
/// --socket, --ctx, --ignore-stdin) are honoured, the llama.cpp-specific ones are
/// accepted and listed in `ignored` (main warns about them), and a leading `worker`
/// subcommand word is skipped. As with Go's flag package, a flag may have one or two
/// dashes and its value may follow after "=" or as the next argument.
public struct WorkerOptions: Equatable {
    /// Directory holding the Hugging Face snapshot: config.json and *.safetensors.
    public var modelDir = ""
    /// Unix socket to serve the worker protocol on.
    public var socketPath = ""
    /// --ctx: the longest sequence accepted; 0 means the largest bucket.
    public var contextTokens = 0
    /// --buckets: the sequence lengths compiled at start, smallest first.
    public var buckets = WorkerOptions.defaultBuckets
    /// Keep running when stdin reaches EOF.
    public var ignoreStdin = false
    /// --model-name: the name /health reports; empty means the snapshot's own.
    public var modelName = ""
    /// Flags accepted for compatibility and ignored, in the order given.
    public var ignored: [String] = []
    /// -h or --help was given.
    public var showHelp = false

    public static let defaultBuckets = [256, 1024, 8192]

    /// Flags of `embed-stack worker` that configure llama.cpp or its logging and mean
    /// nothing to MLX. Each takes a value.
    public static let ignoredFlags: Set<String> = [
        "threads", "batch", "seqs", "gpu-layers", "log-format", "log-level",
    ]

    public init() {}

    public static let usage = """
        Usage: mlx-embed-server --model DIR --socket PATH [flags]

        Embeds token-id sequences with Qwen3-Embedding in MLX (Apple Silicon), serving the
        embed-stack worker protocol (GET /health, POST /embed) on a Unix socket. Started by
        `embed-stack serve --warm-backend mlx`; it exits on SIGTERM or SIGINT and when its
        stdin reaches EOF.

        Flags:
          --model DIR        Hugging Face snapshot directory: config.json and *.safetensors (required)
          --socket PATH      Unix socket to serve on; its directory should be private (required)
          --ctx N            longest sequence accepted, in tokens; buckets above N are dropped and
                             N is added as the largest (0 = the largest bucket)
          --buckets LIST     comma-separated sequence lengths compiled and warmed at start; each
                             input is padded to the smallest that fits (default 256,1024,8192)
          --model-name NAME  name reported by /health (default: the snapshot's _name_or_path, else
                             the directory name)
          --ignore-stdin     keep running when stdin reaches EOF (for running by hand)
          --threads, --batch, --seqs, --gpu-layers, --log-format, --log-level N
                             accepted for compatibility with `embed-stack worker` and ignored

        """

    /// Parses arguments (without the program name).
    public static func parse(_ args: [String]) throws -> WorkerOptions {
        var o = WorkerOptions()
        var i = 0
        while i < args.count {
            let arg = args[i]
            i += 1
            if arg == "worker" && i == 1 {
                continue  // `embed-stack worker ...` argument lists start with the subcommand
            }
            guard arg.hasPrefix("-"), arg != "-", arg != "--" else {
                throw UsageError("unexpected argument \(arg); see --help")
            }
            var name = String(arg.drop(while: { $0 == "-" }))
            var inline: String?
            if let eq = name.firstIndex(of: "=") {
                inline = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            // The flag's value: after "=", else the next argument.
            func value() throws -> String {
                if let inline {
                    return inline
                }
                guard i < args.count else {
                    throw UsageError("flag --\(name) needs a value")
                }
                i += 1
                return args[i - 1]
            }
            func integer() throws -> Int {
                let v = try value()
                guard let n = Int(v), n >= 0 else {
                    throw UsageError("--\(name) \(v): want a whole number of tokens, 0 or more")
                }
                return n
            }

            switch name {
            case "model":
                o.modelDir = try value()
            case "socket":
                o.socketPath = try value()
            case "ctx":
                o.contextTokens = try integer()
            case "buckets":
                o.buckets = try parseBuckets(value())
            case "model-name":
                o.modelName = try value()
            case "ignore-stdin":
                // A boolean flag takes no separate value, as in Go: only --flag=false.
                let v = inline?.lowercased() ?? "true"
                switch v {
                case "true", "1": o.ignoreStdin = true
                case "false", "0": o.ignoreStdin = false
                default: throw UsageError("--ignore-stdin=\(v): want true or false")
                }
            case "h", "help":
                o.showHelp = true
            default:
                guard ignoredFlags.contains(name) else {
                    throw UsageError("unknown flag \(arg); see --help")
                }
                _ = try value()
                o.ignored.append("--" + name)
            }
        }
        if !o.showHelp && (o.modelDir.isEmpty || o.socketPath.isEmpty) {
            throw UsageError("--model and --socket are required")
        }
        return o
    }

    /// "256,1024,8192" → [256, 1024, 8192]: positive, sorted, without duplicates.
    static func parseBuckets(_ list: String) throws -> [Int] {
        var out: [Int] = []
        for field in list.split(separator: ",", omittingEmptySubsequences: false) {
            let f = field.trimmingCharacters(in: .whitespaces)
            guard let n = Int(f), n > 0 else {
                throw UsageError("--buckets \(list): \"\(f)\" is not a positive number of tokens")
            }
            out.append(n)
        }
        return Array(Set(out)).sorted()
    }

    /// The buckets in force: with --ctx N, the buckets up to N, then N itself as the
    /// largest, so that the worker accepts exactly what the supervisor asked for (serve
    /// passes its --warm-max-tokens as --ctx).
    public var effectiveBuckets: [Int] {
        guard contextTokens > 0 else { return buckets }
        var kept = buckets.filter { $0 <= contextTokens }
        if kept.last != contextTokens {
            kept.append(contextTokens)
        }
        return kept
    }
}
