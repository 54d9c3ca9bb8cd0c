# duet-tools: the duet command (keys, health, sim, ...), e.g. the compose
# keys init service: `duet keys --dir /keys` into the shared keys volume.
FROM scratch
COPY duet /
COPY --chown=65532:65532 keys /keys
USER 65532:65532
ENTRYPOINT ["/duet"]
