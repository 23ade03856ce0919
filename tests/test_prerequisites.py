""".ci/prerequisites (make doctor, .ci/run) on simulated machines: a PATH of stub commands
(python3, make, node, npm, the browsers, dpkg-query, apt-cache, apt-get, sudo) stands for a
Debian machine, an Ubuntu one and one with NodeSource's Node.js, and a fake apt-get records
what would be installed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "prerequisites"
BASH = shutil.which("bash")
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = 'PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\nID_LIKE=debian\n'
EVERYTHING = {"python3", "make", "node", "npm", "chromium", "fonts"}


def machine(tmp_path: Path, os_release: str, have: set[str], *, nodejs_version: str = "",
            nodesource_repo: bool = False, venv: bool = True, root: bool = True) -> dict:
    """A fake machine: returns the environment that runs the script on it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"

    def stub(name: str, body: str) -> None:
        path = bin_dir / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)

    os.symlink(shutil.which("grep"), bin_dir / "grep")
    for name in {"python3", "make", "node", "npm", "chromium", "chromium-browser",
                 "google-chrome"} & have:
        stub(name, "exit 0")
    if "python3" in have:
        stub("python3", f'case "$*" in *ensurepip*) exit {0 if venv else 1};; esac; exit 0')
    fonts = "install ok installed" if "fonts" in have else ""
    stub("dpkg-query", f'''case "$*" in
  *Status*fonts-dejavu-core*) printf %s "{fonts}";;
  *Version*nodejs*) printf %s "{nodejs_version}";;
  *) exit 1;;
esac''')
    origin = "https://deb.nodesource.com/node_20.x nodistro/main" if nodesource_repo else \
        "http://deb.debian.org/debian bookworm/main"
    stub("apt-cache", f'echo "nodejs:"; echo "  Candidate: 20.0"; echo "     500 {origin}"')
    stub("apt-get", f'echo "apt-get $*" >> "{log}"')
    stub("sudo", f'echo "sudo" >> "{log}"; "$@"')
    stub("id", f'echo {0 if root else 1000}')
    (tmp_path / "os-release").write_text(os_release)
    return {"PATH": str(bin_dir), "PREREQUISITES_OS_RELEASE": str(tmp_path / "os-release"),
            "HOME": str(tmp_path), "_log": str(log)}


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if not k.startswith("_")}
    return subprocess.run([BASH, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=30)


def missing(env: dict) -> list[str]:
    result = run(env, "--list")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize("os_release", [DEBIAN, UBUNTU])
def test_nothing_missing_installs_nothing(tmp_path: Path, os_release: str) -> None:
    env = machine(tmp_path, os_release, EVERYTHING)
    assert missing(env) == []
    report = run(env)
    assert report.returncode == 0 and "nothing missing" in report.stdout
    assert run(env, "--install").returncode == 0
    assert not Path(env["_log"]).exists()


def test_bare_debian(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, set())
    assert missing(env) == ["python3", "python3-venv", "make", "nodejs", "npm", "chromium",
                            "fonts-dejavu-core"]
    report = run(env)
    assert report.returncode == 1
    assert "missing  chromium: apt package chromium" in report.stdout


def test_bare_ubuntu_gets_the_chromium_snap(tmp_path: Path) -> None:
    env = machine(tmp_path, UBUNTU, set())
    assert missing(env) == ["python3", "python3-venv", "make", "nodejs", "npm",
                            "chromium-browser", "fonts-dejavu-core"]


def test_debian_python_without_venv(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING, venv=False)
    assert missing(env) == ["python3-venv"]


@pytest.mark.parametrize("os_release", [DEBIAN, UBUNTU])
def test_nodesource_node_is_not_given_debian_npm(tmp_path: Path, os_release: str) -> None:
    # NodeSource's nodejs (with its npm) is installed; the browser and fonts are not.
    env = machine(tmp_path, os_release, {"python3", "make", "node", "npm"},
                  nodejs_version="20.11.0-1nodesource1", nodesource_repo=True)
    browser = "chromium-browser" if os_release == UBUNTU else "chromium"
    assert missing(env) == [browser, "fonts-dejavu-core"]
    assert run(env, "--install").returncode == 0
    assert Path(env["_log"]).read_text().splitlines() == [
        "apt-get update",
        f"apt-get install -y --no-install-recommends {browser} fonts-dejavu-core",
    ]


def test_nodesource_repository_without_node_asks_for_nodejs_alone(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING - {"node", "npm"}, nodesource_repo=True)
    assert missing(env) == ["nodejs"]


def test_nodesource_node_missing_its_npm_is_reinstalled_not_mixed(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING - {"npm"}, nodejs_version="20.11.0-1nodesource1",
                  nodesource_repo=True)
    assert missing(env) == []
    assert "reinstall" in run(env).stdout


def test_debian_node_without_npm(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING - {"npm"}, nodejs_version="18.19.0+dfsg-6")
    assert missing(env) == ["npm"]


@pytest.mark.parametrize("name", ["chromium-browser", "google-chrome"])
def test_an_existing_browser_under_another_name_is_used(tmp_path: Path, name: str) -> None:
    env = machine(tmp_path, UBUNTU, (EVERYTHING - {"chromium"}) | {name})
    assert missing(env) == []
    assert f"chromium ({tmp_path / 'bin' / name})" in run(env).stdout


def test_chromium_named_by_the_environment(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING - {"chromium"})
    browser = tmp_path / "opt-chrome"
    browser.write_text(f"#!{BASH}\nexit 0\n")
    browser.chmod(0o755)
    assert missing({**env, "CHROMIUM": str(browser)}) == []


def test_install_as_a_user_goes_through_sudo(tmp_path: Path) -> None:
    env = machine(tmp_path, DEBIAN, EVERYTHING - {"fonts"}, root=False)
    assert run(env, "--install").returncode == 0
    assert Path(env["_log"]).read_text().splitlines() == [
        "sudo", "apt-get update",
        "sudo", "apt-get install -y --no-install-recommends fonts-dejavu-core",
    ]


def test_unknown_argument_is_named(tmp_path: Path) -> None:
    result = run(machine(tmp_path, DEBIAN, EVERYTHING), "--fix")
    assert result.returncode == 2 and "'--fix'" in result.stderr
