# The sharesync node image: the CLI/daemon plus the demo scripts (docker-compose.yml runs the two-device
# walkthrough with it). Build: docker build -t sharesync-demo .   (about 5 minutes on two cores)
ARG SWIFT_VERSION=6.3

FROM swift:${SWIFT_VERSION}-bookworm AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libsqlite3-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so source edits do not refetch them.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
COPY Tests ./Tests
# --static-swift-stdlib: Swift's runtime and Foundation linked in: the node starts sooner and syncs with
# less CPU (README, "Operating a node").
RUN swift build -c release --static-swift-stdlib --product sharesync \
    && install -D "$(swift build -c release --show-bin-path)/sharesync" /out/sharesync

FROM swift:${SWIFT_VERSION}-bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libsqlite3-0 zlib1g python3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/sharesync /usr/local/bin/sharesync
COPY demo /opt/sharesync/demo
EXPOSE 7420
ENTRYPOINT []
CMD ["sharesync", "--help"]
