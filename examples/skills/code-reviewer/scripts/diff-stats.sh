#!/usr/bin/env bash
# List the files a branch changes against BASE (default: main), with added/removed lines,
# largest change first, so the review can start with the files that matter most.
set -euo pipefail

base="${1:-main}"
if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "diff-stats: not inside a Git repository" >&2
    exit 2
fi
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
    echo "diff-stats: unknown base '$base' (try origin/main, a tag or a commit)" >&2
    exit 2
fi

merge_base="$(git merge-base "$base" HEAD)"
stats="$(git diff --numstat "$merge_base")"
echo "Changes since $(git rev-parse --short "$merge_base") (merge base with $base):"
if [ -z "$stats" ]; then
    echo "no changes"
    exit 0
fi
# numstat prints "-" for binary files.
printf '%s\n' "$stats" | awk -F'\t' '{
    add = ($1 == "-") ? 0 : $1; del = ($2 == "-") ? 0 : $2
    printf "%6d  +%-6d -%-6d %s%s\n", add + del, add, del, $3, ($1 == "-") ? " (binary)" : ""
}' | sort -k1,1nr -s
printf '%s\n' "$stats" | awk -F'\t' '
    { n++; if ($1 != "-") { a += $1; d += $2 } }
    END { printf "%d files changed, %d insertions(+), %d deletions(-)\n", n, a, d }'
