# shellcheck shell=bash
# Sourced by the scripts that build aloft: exports the build's source identity, which the
# binaries record (aloft_api::build): ALOFT_GIT_COMMIT (the checkout's HEAD), ALOFT_GIT_TREE_STATE
# (clean, or dirty with uncommitted changes) and ALOFT_BUILD_DATE (the commit's date, UTC, so that
# building one commit twice gives the same binaries). Values already in the environment win (a
# packager building from a tarball sets them); outside a git checkout nothing is set and the
# binaries say the commit was not recorded.
if [ -z "${ALOFT_GIT_COMMIT:-}" ] && command -v git >/dev/null 2>&1 &&
   git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  _aloft_src=$(dirname "${BASH_SOURCE[0]}")
  ALOFT_GIT_COMMIT=$(git -C "$_aloft_src" rev-parse HEAD)
  if [ -z "$(git -C "$_aloft_src" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    ALOFT_GIT_TREE_STATE=clean
  else
    ALOFT_GIT_TREE_STATE=dirty
  fi
  ALOFT_BUILD_DATE=$(TZ=UTC git -C "$_aloft_src" show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
  export ALOFT_GIT_COMMIT ALOFT_GIT_TREE_STATE ALOFT_BUILD_DATE
  unset _aloft_src
fi
