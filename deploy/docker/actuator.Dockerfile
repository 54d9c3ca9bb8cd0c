# duet-actuator: the actuator: reconstructs u_t from the parties' output shares.
# FROM scratch: one static binary (CGO_ENABLED=0), no shell, no libc, no CA
# certificates. The build context is build/ctx/actuator, filled by `make images`.
# /duet is there for the health check: `/duet health http://127.0.0.1:9100/readyz`.
FROM scratch
COPY actuator duet /
# An empty /keys owned by the service user: a named volume mounted there
# starts with this owner (compose); Kubernetes mounts Secrets instead.
COPY --chown=65532:65532 keys /keys
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/actuator"]
