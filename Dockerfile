# The rlguard daemon image (helm/rlguard runs it): the monitor core and Slack, no torch.
#   docker build -t rlguard:0.1.0 .
#   docker run --rm rlguard:0.1.0 daemon --help
# The daemon reads the Slack webhook URL from a mounted file or RLGUARD_SLACK_WEBHOOK_URL at
# run time; no credential is ever part of the image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The shipped rule packs and alias table live at /opt/rlguard/rules (the chart's
# rulesIncludeDefault loads /opt/rlguard/rules/default.yaml from there).
COPY rules/ /opt/rlguard/rules/
COPY pyproject.toml README.md /tmp/rlguard-src/
COPY src/ /tmp/rlguard-src/src/
COPY trainer/ /tmp/rlguard-src/trainer/

# `.[slack,otlp]` only: the monitor core, slack-sdk and opentelemetry-proto (POST /v1/logs,
# the chart's collector.enabled). The `trainer` extra (torch, transformers)
# is not installed. The wheel does not carry the rules (src/rlguard/rules is a link to the
# top-level rules/), so the installed package's rules/ is linked to /opt/rlguard/rules.
WORKDIR /tmp/rlguard-src
RUN ln -s /opt/rlguard/rules rules \
 && pip install ".[slack,otlp]" \
 && pkg="$(python -c 'import pathlib, rlguard; print(pathlib.Path(rlguard.__file__).parent)')" \
 && rm -rf "$pkg/rules" \
 && ln -s /opt/rlguard/rules "$pkg/rules" \
 && cd / && rm -rf /tmp/rlguard-src \
 && rlguard rules list >/dev/null \
 && groupadd --gid 10001 rlguard \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin rlguard

WORKDIR /
USER 10001:10001
EXPOSE 9108
ENTRYPOINT ["rlguard"]
CMD ["daemon", "--help"]
