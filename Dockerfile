# The operator's image: a glibc build on Debian 12 (bookworm), shipped on an
# empty base with exactly the files it needs. `cargo xtask image` builds the
# same image without a container daemon (same files, from a bookworm
# machine) and, with xtask's tests, fails when this final stage and its
# image differ in user, entrypoint, ports, labels, environment or files.
# FROM scratch rather than gcr.io/distroless/cc-debian12: a base image brings
# files (libstdc++, libgomp, tzdata, its own passwd) that xtask's image would
# not have and no test could list, so the two would drift unseen.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p vrouter-operator \
 && cp target/release/vrouter-operator /vrouter-operator \
 && mkdir -m 1777 /image-tmp

FROM scratch
COPY --from=build /vrouter-operator /vrouter-operator
# What `ldd` lists for the binary: the loader, glibc's libc and libm, and
# libgcc_s (Rust's unwinder). The loader's path is the one written in the binary.
COPY --from=build /lib64/ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
COPY --from=build /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/
# The Proxmox client trusts the system CAs (rustls-native-certs).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# uid/gid 65532 "nonroot" as on distroless; hosts from /etc/hosts, then DNS.
COPY deploy/image/passwd deploy/image/group deploy/image/nsswitch.conf /etc/
COPY --from=build /image-tmp /tmp
USER 65532:65532
# Health probes, metrics, admission webhooks (the chart's ports).
EXPOSE 8081 8443 9443
LABEL org.opencontainers.image.title="vrouter-operator" \
      org.opencontainers.image.description="Keeps VyOS and DozenOS routers configured as declared" \
      org.opencontainers.image.source="https://github.com/vrouter-operator/vrouter-operator-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
ENTRYPOINT ["/vrouter-operator"]
