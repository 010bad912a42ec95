# A small static image: build with musl, ship on distroless.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p vrouter-operator \
 && cp target/x86_64-unknown-linux-musl/release/vrouter-operator /vrouter-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /vrouter-operator /vrouter-operator
USER 65532:65532
ENTRYPOINT ["/vrouter-operator"]
