# duet-nats: the NATS server with JetStream, built from the
# github.com/nats-io/nats-server/v2 module pinned in go.mod (no image is
# pulled). The configuration is mounted at /etc/nats/nats.conf (compose:
# deploy/nats.conf; Kubernetes: a ConfigMap). /duet is the health probe:
# `/duet health http://127.0.0.1:8222/healthz`.
FROM scratch
COPY nats-server duet /
COPY --chown=65532:65532 data /data
USER 65532:65532
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/nats.conf"]
