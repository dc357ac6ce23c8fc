#!/usr/bin/env bash
# Puts Mermaid's browser bundle into the docs site (docs/assets/javascripts/mermaid.min.js),
# where mkdocs.yml's extra_javascript loads it. mkdocs-material draws the ``` mermaid blocks
# with a `mermaid` already on the page and otherwise fetches mermaid@11 from unpkg.com, which
# a reader offline or behind a proxy cannot reach: they would see the diagrams' source text.
# The version is the major mkdocs-material 9.8 asks for; the sha256 is the file's, so a
# changed upstream file is refused rather than shipped.
set -euo pipefail
VERSION=11.17.2
SHA256=581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "mermaid@$VERSION" >/dev/null && tar xzf "mermaid-$VERSION.tgz" package/dist/mermaid.min.js)
echo "$SHA256  $work/package/dist/mermaid.min.js" | sha256sum --check --quiet
install -m 0644 "$work/package/dist/mermaid.min.js" docs/assets/javascripts/mermaid.min.js
echo "docs/assets/javascripts/mermaid.min.js: mermaid $VERSION"
