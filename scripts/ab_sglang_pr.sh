#!/usr/bin/env bash
# A/B-test an SGLang pull request: the PR's head against its merge base with --base (default origin/main), as
# git arms of one repository (the harness makes the worktrees and diffs the two refs), then run an experiment
# (default: the seed's DeepSeek-V4-Pro shared-slot experiment; its fix_files must cover what the PR changes).
#
#   scripts/ab_sglang_pr.sh --repo ~/sglang --pr 12345 [--base origin/main] [--experiment NAME] [-- overrides...]
#   scripts/ab_sglang_pr.sh --repo ~/sglang --base v0.5.6 --head my-branch -- experiment.repeats=3
set -euo pipefail

repo="" base="origin/main" head="" pr="" experiment="dsv4_pro_mi355x_shared_slot"
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo="$2"; shift 2 ;;
    --base) base="$2"; shift 2 ;;
    --head) head="$2"; shift 2 ;;
    --pr) pr="$2"; shift 2 ;;
    --experiment) experiment="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[ -n "$repo" ] || { echo "error: --repo is required" >&2; usage; }
[ -n "$head" ] || [ -n "$pr" ] || { echo "error: give --head REF or --pr NUMBER" >&2; usage; }
git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || { echo "error: $repo is not a git repository" >&2; exit 2; }
repo=$(cd "$repo" && pwd)

if [ -n "$pr" ]; then
  head="refs/abh/pr-$pr"
  git -C "$repo" fetch --quiet origin "pull/$pr/head:$head"
fi
head_sha=$(git -C "$repo" rev-parse --verify "$head^{commit}")
# the PR against the commit it branched from, not against whatever main has become since
base_sha=$(git -C "$repo" merge-base "$base" "$head_sha")
echo "baseline: ${base_sha:0:12} (merge base of $base)   change: ${head_sha:0:12} ($head)"
echo "files the change touches:"; git -C "$repo" diff --name-only "$base_sha" "$head_sha" | sed 's/^/  /'

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
exec abh run "experiment=$experiment" "hydra.run.dir=results/$experiment/${base_sha:0:12}..${head_sha:0:12}" \
  "arms.a.source.kind=git" "arms.a.source.path=$repo" "arms.a.source.ref=$base_sha" \
  "arms.b.source.kind=git" "arms.b.source.path=$repo" "arms.b.source.ref=$head_sha" "$@"
