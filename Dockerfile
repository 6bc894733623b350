# The aifab image for Volcano and Ray jobs: `python -m aifab.jobs.replica` must import aifab.
# Built from the wheel, not the source tree:
#   python -m build --wheel --outdir dist .
#   docker build -t REGISTRY/aifab:0.1.0 .
#   aifab job submit job.yaml --executor volcano --dry-run --image REGISTRY/aifab:0.1.0
# Workers that submit to Volcano take the image from AIFAB_IMAGE.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The CPU build of torch first: anything that pulls torch before it pulls a multi-GB CUDA build.
# For GPU nodes, build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu124
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG AIFAB_EXTRAS=ray,k8s,postgres,s3
RUN pip install --index-url "${TORCH_INDEX}" torch==2.13.0

COPY dist/aifab-*.whl /tmp/wheels/
# The wheel's file name pins aifab's version; its dependencies follow its own metadata.
# hadolint ignore=DL3013
RUN set -eu; whl="$(ls /tmp/wheels/aifab-*.whl)"; \
    pip install "${whl}[${AIFAB_EXTRAS}]"; rm -rf /tmp/wheels

# Jobs run as a non-root user. The workspace settings come in as environment variables (see
# docs/team.md): AIFAB_STORAGE_URI and AIFAB_TRACKING_URI are rendered into the pod, AIFAB_DB_URL
# and the storage credentials come from Kubernetes Secrets (JobSpec pod.env_from_secrets); with
# a store the pod keeps only scratch files locally (AIFAB_HOME=/tmp/aifab). Without one, mount
# the shared workspace (AIFAB_HOME) at the same path as on the workers (pod.volumes).
# A numeric USER: Kubernetes' runAsNonRoot can check only a numeric one.
RUN useradd --create-home --uid 1000 --user-group aifab
USER 1000:1000
WORKDIR /home/aifab
ENV AIFAB_HOME=/home/aifab/.aifab
ENTRYPOINT []
CMD ["aifab", "--help"]
