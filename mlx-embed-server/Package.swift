// swift-tools-version: 6.0
//
// mlx-embed-server: a warm embedding worker for Apple Silicon that speaks the
// embed-stack worker protocol (docs/architecture.md) and runs Qwen3-Embedding with MLX.
//
// The only dependency is mlx-swift, pinned exactly: the forward pass calls MLXFast
// kernels whose Swift signatures moved between releases, so a floating range could
// break the build without any change here.

import PackageDescription

let package = Package(
    name: "mlx-embed-server",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "mlx-embed-server", targets: ["MLXEmbedServer"])
    ],
    dependencies: [
        .package(url: "https://github.com/ml-explore/mlx-swift", exact: "0.31.4")
    ],
    targets: [
        // The worker protocol (HTTP/1.1 over a Unix socket, /health, /embed), the command
        // line and the process lifecycle. Foundation only: it builds and tests without
        // MLX, so `swift test` needs no Metal shaders.
        .target(name: "WorkerCore", path: "Sources/WorkerCore"),

        // The Qwen3 forward pass and safetensors loading, in MLX. Knows nothing of HTTP.
        .target(
            name: "Qwen3MLX",
            dependencies: [.product(name: "MLX", package: "mlx-swift")],
            path: "Sources/Qwen3MLX"
        ),

        // Wires the two together.
        .executableTarget(
            name: "MLXEmbedServer",
            dependencies: ["WorkerCore", "Qwen3MLX"],
            path: "Sources/MLXEmbedServer"
        ),

        .testTarget(
            name: "WorkerCoreTests",
            dependencies: ["WorkerCore"],
            path: "Tests/WorkerCoreTests"
        ),
        // config.json parsing only: these tests run no MLX operation, so they pass
        // under `swift test` without the Metal library.
        .testTarget(
            name: "Qwen3MLXTests",
            dependencies: ["Qwen3MLX"],
            path: "Tests/Qwen3MLXTests"
        ),
    ],
    // Swift 5 language mode: MLXArray is not Sendable, and the code hands arrays and
    // closures between threads whose exclusive use it guarantees itself (one engine
    // thread owns every MLX call; see EngineThread). Swift 6 mode would turn those
    // hand-offs into errors without making them any safer.
    swiftLanguageModes: [.v5]
)
