#!/usr/bin/env bash
# MacMesh.app and MacMesh-<version>.dmg, on a Mac (packaging/README.md).
#
#   packaging/build_dmg.sh                 build, sign ad hoc, make the DMG
#
# Signing and notarization, only when their credentials are in the environment:
#   MACMESH_SIGN_IDENTITY   a "Developer ID Application: Name (TEAMID)" identity in the
#                           keychain: signs the app (hardened runtime) and the DMG
#   MACMESH_NOTARY_PROFILE  a notarytool keychain profile (xcrun notarytool store-credentials)
#   or APPLE_ID, APPLE_TEAM_ID and APPLE_APP_PASSWORD (an app-specific password)
#                           notarize the DMG with Apple and staple the ticket to it
# Without them the app is signed ad hoc (codesign --sign -): it runs on this Mac and on
# others after right-click > Open (Gatekeeper asks once).
# SKIP_BUILD=1 reuses build/package/dist/MacMesh.app.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { printf 'build_dmg: %s\n' "$*" >&2; exit 1; }

[ "$(uname -s)" = Darwin ] || fail "a DMG is built on macOS (hdiutil, codesign); on Linux, 'make package-check' checks the bundle"
for tool in hdiutil codesign; do
  command -v "$tool" >/dev/null || fail "$tool not found: install the Xcode Command Line Tools (xcode-select --install)"
done

DIST=build/package/dist
APP="$DIST/MacMesh.app"
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
DMG="$DIST/MacMesh-$VERSION.dmg"
IDENTITY="${MACMESH_SIGN_IDENTITY:-}"

if [ -z "${SKIP_BUILD:-}" ]; then
  make package
fi
[ -d "$APP" ] || fail "no $APP: the build did not make the app bundle"

# The app: every binary inside, then the bundle. A Developer ID signature needs the
# hardened runtime and a secure timestamp for notarization.
if [ -n "$IDENTITY" ]; then
  echo "Signing with $IDENTITY (hardened runtime)"
  codesign --force --deep --timestamp --options runtime \
    --entitlements packaging/entitlements.plist --sign "$IDENTITY" "$APP"
else
  echo "Signing ad hoc (no MACMESH_SIGN_IDENTITY)"
  codesign --force --deep --sign - "$APP"
fi
codesign --verify --deep --strict --verbose=2 "$APP"

# The DMG: the app beside a shortcut to /Applications, to drag it onto.
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/macmesh-dmg.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
ditto "$APP" "$STAGE/MacMesh.app"
ln -s /Applications "$STAGE/Applications"
rm -f "$DMG"
hdiutil create -volname "MacMesh $VERSION" -srcfolder "$STAGE" -fs HFS+ \
  -format UDZO -imagekey zlib-level=9 -ov "$DMG"
if [ -n "$IDENTITY" ]; then
  codesign --force --timestamp --sign "$IDENTITY" "$DMG"
fi

# Notarization: Apple scans the DMG; the stapled ticket lets Gatekeeper open it offline.
notary=()
if [ -n "${MACMESH_NOTARY_PROFILE:-}" ]; then
  notary=(--keychain-profile "$MACMESH_NOTARY_PROFILE")
elif [ -n "${APPLE_ID:-}" ] && [ -n "${APPLE_TEAM_ID:-}" ] && [ -n "${APPLE_APP_PASSWORD:-}" ]; then
  notary=(--apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" --password "$APPLE_APP_PASSWORD")
fi
if [ ${#notary[@]} -gt 0 ]; then
  [ -n "$IDENTITY" ] || fail "notarization needs a Developer ID signature: set MACMESH_SIGN_IDENTITY"
  echo "Notarizing $DMG (this takes a few minutes)"
  xcrun notarytool submit "$DMG" "${notary[@]}" --wait
  xcrun stapler staple "$DMG"
  xcrun stapler validate "$DMG"
  spctl --assess --type open --context context:primary-signature --verbose=2 "$DMG"
fi

du -sh "$APP" "$DMG"
echo "Done: $DMG"
