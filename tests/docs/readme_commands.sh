#!/usr/bin/env bash
# Runs every fenced `sh` block of README.md and docs/*.md marked runnable, and checks that the
# paths, links and ctest selections those pages name exist.
#
# The marker: a line holding exactly `<!-- runnable -->` (an HTML comment, invisible when the
# Markdown is rendered) directly before the block's opening fence, which must be ```sh:
#
#     <!-- runnable -->
#     ```sh
#     build/src/trident config --config inputs/small.toml --ranks 2
#     ```
#
# Mark only commands that take a few seconds and are safe inside ctest: never `make run`,
# `make test` or anything else that builds, and nothing that needs a GPU, Slurm or the network.
#
# How a block runs: in its own scratch copy of the repository under WORK (inputs/, jobs/,
# analysis/, bench/, tools/ and the Makefile copied, data/ linked, build/src/trident a link to the
# TRIDENT under test), as a script under `bash -euo pipefail` with TMPDIR in WORK, so whatever it
# writes (runs/, checkpoints) stays in WORK and nothing is written into the repository. A block
# fails when it exits non-zero, runs past BLOCK_TIMEOUT seconds (default 120), or prints an error
# (`error:` in any case, MPI_ABORT, a crash). The test fails naming each failing block by file,
# line, first command and the command that failed, and fails when README.md has no marked block
# (it cannot pass vacuously) or a marker is not followed by a ```sh fence.
#
# Then, for README.md and docs/*.md: every relative Markdown link must lead to a file, every
# `src/...`, `tests/...`, `bench/...`, `tools/...`, `jobs/...`, `inputs/...`, `analysis/...` or
# `docs/...` path written in backticks must exist (globs and braces expanded; paths with <...>
# skipped), and, given BUILD_DIR, every `ctest -R REGEX` and `ctest -L LABEL` must select a test.
#
# usage: readme_commands.sh TRIDENT SRC WORK [BUILD_DIR]
set -uo pipefail
trident=${1:?usage: readme_commands.sh TRIDENT SRC WORK [BUILD_DIR]}
src=${2:?usage: readme_commands.sh TRIDENT SRC WORK [BUILD_DIR]}
work=${3:?usage: readme_commands.sh TRIDENT SRC WORK [BUILD_DIR]}
build=${4:-}
timeout_s=${BLOCK_TIMEOUT:-120}
trident=$(cd "$(dirname "$trident")" && pwd)/$(basename "$trident")
src=$(cd "$src" && pwd)
rm -rf "$work" && mkdir -p "$work/blocks" "$work/tmp" || exit 1
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

pages=("$src/README.md")
for page in "$src"/docs/*.md; do
  [[ -f $page ]] && pages+=("$page")
done

# The marked blocks: blocks/NNN.sh, and blocks/index with "NNN<TAB>file:line<TAB>first command".
for page in "${pages[@]}"; do
  awk -v page="${page#"$src"/}" -v dir="$work/blocks" '
    BEGIN { n = 0; while ((getline line < (dir "/count")) > 0) n = line + 0; close(dir "/count") }
    marked == 1 {
      if ($0 != "```sh") {
        printf "BADMARKER\t%s:%d\n", page, NR - 1 >> (dir "/index"); marked = 0; next
      }
      n++; file = sprintf("%s/%03d.sh", dir, n); first = ""; fence_line = NR; marked = 2; next
    }
    marked == 2 {
      if ($0 ~ /^```/) {
        printf "%03d\t%s:%d\t%s\n", n, page, fence_line, first >> (dir "/index")
        close(file); marked = 0; next
      }
      print > file
      if (first == "" && $0 !~ /^[[:space:]]*(#|$|export )/) {
        first = $0; sub(/[[:space:]]+#.*$/, "", first)
      }
      next
    }
    $0 == "<!-- runnable -->" { marked = 1 }
    END {
      if (marked == 2) printf "UNCLOSED\t%s:%d\n", page, fence_line >> (dir "/index")
      if (marked == 1) printf "BADMARKER\t%s:%d\n", page, NR >> (dir "/index")
      print n > (dir "/count")
    }' "$page"
done
touch "$work/blocks/index"
while IFS=$'\t' read -r what where _; do
  case $what in
    BADMARKER) fail "[$where]: <!-- runnable --> is not followed by a \`\`\`sh fence" ;;
    UNCLOSED) fail "[$where]: the runnable block is never closed" ;;
  esac
done < "$work/blocks/index"
if ! grep -q $'^[0-9]*\tREADME.md:' "$work/blocks/index"; then
  fail "[README.md]: no block is marked <!-- runnable -->; mark at least one cheap command block"
fi

# The scratch copy each block runs in, made afresh per block so that blocks do not see each
# other's runs.
(cd "$src" && tar --exclude=node_modules -cf "$work/scratch.tar" inputs jobs analysis bench tools \
  Makefile) || { echo "FAIL: could not copy the repository"; exit 1; }
scratch() {  # scratch DIR
  mkdir -p "$1/build/src" && (cd "$1" && tar -xf "$work/scratch.tar") &&
    ln -s "$src/data" "$1/data" && ln -s "$trident" "$1/build/src/trident"
}

# Each block runs through this wrapper, which names the command that failed.
cat > "$work/blocks/run.sh" <<'EOF'
trap 'echo "readme_commands: this command failed: $BASH_COMMAND" >&2' ERR
. "$1"
EOF
blocks=0
while IFS=$'\t' read -r id where first; do
  [[ $id =~ ^[0-9]+$ ]] || continue
  blocks=$((blocks + 1))
  log="$work/blocks/$id.log"
  root="$work/root$id"
  scratch "$root" || { fail "[$where] block $id: could not make its scratch copy"; continue; }
  start=$(date +%s)
  (cd "$root" && TMPDIR="$work/tmp" timeout "$timeout_s" bash -euo pipefail "$work/blocks/run.sh" \
    "$work/blocks/$id.sh") \
    < /dev/null > "$log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - start))
  errors=$(grep -inE 'error:|mpi_abort|segmentation fault|core dumped|terminate called' "$log" |
             head -n 5)
  if [[ $rc -ne 0 || -n $errors ]]; then
    if [[ $rc -eq 124 ]]; then
      fail "[$where] block $id ($first): ran past ${timeout_s} s"
    elif [[ $rc -ne 0 ]]; then
      failed=$(sed -n 's/^readme_commands: this command failed: //p' "$log" | tail -n 1)
      fail "[$where] block $id ($first): exit status $rc${failed:+ from \`$failed\`}"
    else
      fail "[$where] block $id ($first): printed an error"
    fi
    echo "--- the block:"
    cat "$work/blocks/$id.sh"
    [[ -n $errors ]] && { echo "--- error lines:"; echo "$errors"; }
    echo "--- the last lines of its output:"
    tail -n 20 "$log"
    echo "---"
  else
    echo "ok   [$where] block $id ($first): ${seconds} s"
  fi
done < "$work/blocks/index"

# Links, paths and ctest selections the pages name.
# shellcheck disable=SC2016  # the backticks are Markdown's code spans, not command substitutions
backticked_paths() {  # backticked_paths PAGE: the repository paths PAGE writes in code spans
  grep -oE '`(src|tests|bench|tools|jobs|inputs|analysis|docs)/[^` ]*`' "$1" | tr -d '`' | sort -u
}
for page in "${pages[@]}"; do
  rel=${page#"$src"/}
  dir=$(dirname "$page")
  while read -r target; do
    target=${target%%#*}
    [[ -z $target || $target =~ ^[a-z]+: ]] && continue
    [[ -e $dir/$target ]] || fail "[$rel]: the link ($target) leads nowhere"
  done < <(grep -oE '\]\([^)]+\)' "$page" | sed -E 's/^\]\((.*)\)$/\1/')
  while read -r path; do
    path=${path%[.,:;)]}
    [[ $path == *'<'* || $path == *'…'* || $path == *'...'* ]] && continue
    [[ $path =~ ^[A-Za-z0-9_./{},*+-]+$ ]] || continue
    found=1
    for f in $(cd "$src" && eval "echo $path"); do
      [[ -e $src/$f ]] || found=0
    done
    [[ $found -eq 1 ]] || fail "[$rel]: \`$path\` does not exist"
  done < <(backticked_paths "$page")
  if [[ -n $build && -f $build/CTestTestfile.cmake ]]; then
    while read -r flag selection; do
      selection=${selection#\'} selection=${selection%\'}
      n=$(cd "$build" && ctest -N "$flag" "$selection" 2>/dev/null | sed -n 's/^Total Tests: //p')
      [[ ${n:-0} -gt 0 ]] || fail "[$rel]: \`ctest $flag $selection\` selects no test"
    done < <(grep -oE "ctest( -N)? -[RL] ('[^']+'|[^ \`')]+)" "$page" | sed -E 's/^ctest( -N)? //' |
               sort -u)
  fi
done

echo "$blocks runnable blocks run from README.md and docs/"
if [[ $failures -gt 0 ]]; then
  echo "$failures failures"
  exit 1
fi
echo "README and docs commands: ok"
