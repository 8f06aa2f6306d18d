#!/usr/bin/env bash
# A/B-test an SGLang pull request: make worktrees of the base and the PR, then run an experiment with the
# two trees as the arms (default: the seed's DeepSeek-V4-Pro shared-slot experiment).
#
#   scripts/ab_sglang_pr.sh --repo ~/sglang --base origin/main --pr 12345 [--experiment NAME] [-- overrides...]
#   scripts/ab_sglang_pr.sh --repo ~/sglang --base v0.5.6 --head my-branch -- experiment.repeats=3
#
# The worktrees go to $WORKTREES (default ~/.cache/abh/worktrees/<base>..<head>); they are reused if present.
set -euo pipefail

repo="" base="" head="" pr="" experiment="dsv4_pro_mi355x_shared_slot"
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
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
[ -n "$repo" ] && [ -n "$base" ] || { echo "error: --repo and --base are required" >&2; usage; }
[ -n "$head" ] || [ -n "$pr" ] || { echo "error: give --head REF or --pr NUMBER" >&2; usage; }
git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || { echo "error: $repo is not a git repository" >&2; exit 2; }

if [ -n "$pr" ]; then
  head="refs/abh/pr-$pr"
  git -C "$repo" fetch --quiet origin "pull/$pr/head:$head"
fi
base_sha=$(git -C "$repo" rev-parse --verify "$base^{commit}")
head_sha=$(git -C "$repo" rev-parse --verify "$head^{commit}")
root="${WORKTREES:-$HOME/.cache/abh/worktrees}/${base_sha:0:12}..${head_sha:0:12}"
mkdir -p "$root"
for side in base fix; do
  sha=$base_sha; [ "$side" = fix ] && sha=$head_sha
  if [ ! -d "$root/$side" ]; then
    git -C "$repo" worktree add --detach "$root/$side" "$sha" >/dev/null
  fi
  echo "$side tree: $root/$side at ${sha:0:12}"
done

export SGLANG_BASE_TREE="$root/base" SGLANG_FIX_TREE="$root/fix"
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
exec abh run "experiment=$experiment" "hydra.run.dir=results/$experiment/${base_sha:0:12}..${head_sha:0:12}" "$@"
