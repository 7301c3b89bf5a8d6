"""Verifier for fix-permissions: modes, ownership and the new user, one rule per test."""
import grp
import os
import pwd
import stat

SITE = "/app/site"
BIN_FILES = ["bin/deploy.sh", "bin/healthcheck.sh"]
SECRET = "config/secret.key"
UPLOADS = "uploads"
OTHER_FILES = ["config/app.conf", "public/index.html", "public/css/style.css", "uploads/README"]
OTHER_DIRS = [".", "bin", "config", "public", "public/css"]
SNAPSHOT = {
    "bin/healthcheck.sh": b"#!/bin/sh\necho healthy\n",
    "config/secret.key": b"k3y-7f2c9a1e-do-not-share\n",
    "public/css/style.css": b"body { font-family: sans-serif; }\n",
    "uploads/README": b"uploads land here\n",
}


def mode(rel):
    return stat.S_IMODE(os.lstat(os.path.join(SITE, rel)).st_mode)


def owner(rel):
    st = os.lstat(os.path.join(SITE, rel))
    return pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name


def test_webapp_user_and_group_exist():
    user = pwd.getpwnam("webapp")
    assert grp.getgrgid(user.pw_gid).gr_name == "webapp"


def test_bin_scripts_are_755():
    for rel in BIN_FILES:
        assert mode(rel) == 0o755, rel


def test_secret_key_is_600_and_owned_by_webapp():
    assert mode(SECRET) == 0o600
    assert owner(SECRET) == ("webapp", "webapp")


def test_uploads_dir_is_770_and_owned_by_webapp():
    assert os.path.isdir(os.path.join(SITE, UPLOADS))
    assert mode(UPLOADS) == 0o770
    assert owner(UPLOADS) == ("webapp", "webapp")


def test_other_files_are_644_and_unchanged():
    for rel in OTHER_FILES:
        assert mode(rel) == 0o644, rel
    for rel, content in SNAPSHOT.items():
        with open(os.path.join(SITE, rel), "rb") as f:
            assert f.read() == content, rel


def test_other_directories_are_755():
    for rel in OTHER_DIRS:
        assert os.path.isdir(os.path.join(SITE, rel)), rel
        assert mode(rel) == 0o755, rel
