#!/bin/sh
# The report's browser test (tests/test_report_browser.py) needs headless Chromium.
# Installing a system package is never silent: Debian's chromium is installed with apt
# only in CI (CI=true) or when asked for (NORMBENCH_INSTALL_CHROMIUM=1), as root, and
# what is installed is printed. Otherwise the browser test skips, saying how to run it.
command -v chromium >/dev/null 2>&1 && exit 0
[ -n "${NORMBENCH_CHROMIUM:-}" ] && exit 0
if [ "${CI:-}" != "true" ] && [ "${NORMBENCH_INSTALL_CHROMIUM:-}" != "1" ]; then
    echo "normbench: chromium not found; the report's browser test will skip. To run it, install Debian's" \
         "chromium yourself, set NORMBENCH_CHROMIUM=/path/to/chromium, or let tox install it with apt:" \
         "NORMBENCH_INSTALL_CHROMIUM=1 tox -e core"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "normbench: cannot install chromium here (needs apt-get as root); the browser test will skip"
    exit 0
fi
echo "normbench: installing Debian's chromium with apt-get for the report's browser test" \
     "(CI=${CI:-}, NORMBENCH_INSTALL_CHROMIUM=${NORMBENCH_INSTALL_CHROMIUM:-})"
log=$(mktemp)
install() { apt-get install -y -q chromium >"$log" 2>&1; }
install || { apt-get update -q >/dev/null 2>&1 && install; }
grep -E "^(The following|  |Need to get|After this operation|[0-9]+ upgraded)" "$log"
rm -f "$log"
command -v chromium >/dev/null 2>&1 || echo "normbench: the chromium install failed; the browser test will skip"
exit 0
