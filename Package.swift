// swift-tools-version:6.1
import PackageDescription

// Modules by layer. Lower layers never import higher ones:
//   ShareSyncCore   records, zones, shares, participants, tokens, errors, the access-control policy (no I/O)
//   ShareSyncStore  SQLite through GRDB: the owner's private database and the participant replica
//   ShareSyncWire   protocol messages, the frame codec (zlib, line framing, limits), NIO handlers
//   ShareSyncNode   the owner server, the participant sync engine, the local control channel
//   ShareSync       the API apps build on: Container, Database, Query, shares (embedded or connected)
//   sharesync       the command line
let package = Package(
    name: "ShareSync",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "ShareSync", targets: ["ShareSync"]),
        .library(name: "ShareSyncCore", targets: ["ShareSyncCore"]),
        .library(name: "ShareSyncStore", targets: ["ShareSyncStore"]),
        .library(name: "ShareSyncWire", targets: ["ShareSyncWire"]),
        .library(name: "ShareSyncNode", targets: ["ShareSyncNode"]),
        .library(name: "ShareSyncTestSupport", targets: ["ShareSyncTestSupport"]),
        .executable(name: "sharesync", targets: ["sharesync"]),
        .executable(name: "sharesync-bench", targets: ["sharesync-bench"]),
        .executable(name: "sharesync-fuzz", targets: ["sharesync-fuzz"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", .upToNextMinor(from: "2.101.0")),
        .package(url: "https://github.com/apple/swift-nio-extras.git", exact: "1.35.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", exact: "1.5.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "3.12.3"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", exact: "1.21.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-collections.git", .upToNextMinor(from: "1.6.0")),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        // `swift package generate-documentation --target ShareSync` (the DocC catalog in Sources/ShareSync).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", exact: "1.5.0"),
    ],
    targets: [
        .target(name: "ShareSyncCore", exclude: ["SharingRules.md"]),
        .target(
            name: "ShareSyncStore",
            dependencies: [
                "ShareSyncCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        // zlib's own API for the frame codec: compress-nio (still used by the bench) does not expose
        // deflateSetDictionary and inflateSetDictionary, which let connections share pooled zlib
        // streams (measured reason in ShareSyncWire's ZlibStreams.swift). The same system libz.
        .systemLibrary(name: "CZlib"),
        // glibc's `mallopt`, for the daemon's allocator settings (ShareSyncNode's AllocatorTuning.swift).
        .systemLibrary(name: "CMalloc"),
        .target(
            name: "ShareSyncWire",
            dependencies: [
                "ShareSyncCore",
                "CZlib",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(
            name: "ShareSyncNode",
            dependencies: [
                "ShareSyncCore", "ShareSyncStore", "ShareSyncWire", "CMalloc",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .target(
            name: "ShareSync",
            dependencies: [
                "ShareSyncCore", "ShareSyncNode", .product(name: "Logging", package: "swift-log"),
                .product(name: "OrderedCollections", package: "swift-collections"),
            ]
        ),
        .target(
            name: "ShareSyncTestSupport",
            dependencies: [
                "ShareSyncNode", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "sharesync",
            dependencies: [
                "ShareSync", "ShareSyncNode",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "sharesync-bench",
            dependencies: [
                "ShareSync", "ShareSyncCore", "ShareSyncStore", "ShareSyncWire", "ShareSyncNode",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The fuzz targets (issue 10): one function per decoder, run by libFuzzer, the replay driver
        // and the regression test. See the README, "Fuzzing".
        .target(
            name: "ShareSyncFuzzing",
            dependencies: [
                "ShareSyncCore", "ShareSyncWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .executableTarget(name: "sharesync-fuzz", dependencies: ["ShareSyncFuzzing"]),
        .testTarget(
            // The store and GRDB: a test fills the embedded node's disk (SyncEngineTargetPendingTests).
            name: "ShareSyncTests",
            dependencies: ["ShareSync", "ShareSyncStore", "ShareSyncTestSupport", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(name: "ShareSyncCoreTests", dependencies: ["ShareSyncCore", "ShareSyncTestSupport"]),
        .testTarget(name: "ShareSyncStoreTests", dependencies: ["ShareSyncStore", "ShareSyncTestSupport"]),
        .testTarget(name: "ShareSyncSharingTests", dependencies: ["ShareSyncStore", "ShareSyncTestSupport"]),
        .testTarget(
            name: "ShareSyncReplicaTests",
            dependencies: ["ShareSyncStore", "ShareSyncTestSupport", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(
            name: "ShareSyncWireTests",
            dependencies: [
                "ShareSyncWire", "ShareSyncTestSupport", "ShareSyncFuzzing",
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "ShareSyncNodeTests",
            dependencies: [
                // Every module the tests import, named: a test module built against an older layout of
                // a type it reaches only through another module was once kept by an incremental build.
                "ShareSyncNode", "ShareSyncStore", "ShareSyncWire", "ShareSyncCore", "ShareSyncTestSupport",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .testTarget(
            name: "ShareSyncCLITests",
            dependencies: [
                "ShareSyncNode", "ShareSyncTestSupport", "ShareSyncCore", "ShareSyncStore", "ShareSyncWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
