#!/usr/bin/env bash
# The compose-files repository's rollout preview: the offline plan of every runbook a changed file
# affects, written as markdown to $GITHUB_STEP_SUMMARY (when set) and stdout. Run from the root of
# the compose-files checkout. Exit 1 when a changed file no longer matches a runbook deploying it.
#
#   usage: preview.sh BASE_REF        e.g. preview.sh origin/main
#   env:   ORCHESTRATE  the orchestrate executable (default: orchestrate on PATH)
#          ORCHESTRATOR_INVENTORY  optional host inventory (each host's compose project)
set -euo pipefail

base="${1:?usage: preview.sh BASE_REF}"
orchestrate="${ORCHESTRATE:-orchestrate}"

# Files changed on this branch since it left BASE_REF (deleted ones too: a runbook may deploy them).
mapfile -t changed < <(git diff --name-only --no-renames "${base}...HEAD")

# The merge base: what the rollout will recreate is the diff from the file the fleet runs now.
args=(ci-preview --repo . --base-ref "$(git merge-base "$base" HEAD)")
for f in "${changed[@]}"; do
  args+=(--changed "$f")
done
if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
  args+=(--summary "$GITHUB_STEP_SUMMARY")
fi
if [[ -n "${ORCHESTRATOR_INVENTORY:-}" ]]; then
  args+=(--inventory "$ORCHESTRATOR_INVENTORY")
fi
exec "$orchestrate" "${args[@]}"
