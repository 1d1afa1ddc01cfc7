// swift-tools-version:6.1
import PackageDescription

// A notes app on the ShareSync library: topics and notes, a topic shared with someone, edits merged
// through the sync engine's events. It uses the public API of the `ShareSync` product only.
let package = Package(
    name: "Notes",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "ShareSync", path: "../.."),
    ],
    targets: [
        .executableTarget(name: "notes", dependencies: [.product(name: "ShareSync", package: "ShareSync")]),
    ],
    swiftLanguageModes: [.v6]
)
