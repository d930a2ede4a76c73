"""An outsider on loopback against the ACL: what must keep holding beyond the happy paths."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from daemon.acl.admin import CreateAccessConfigRequestHeader
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.acl.conftest import ADMIN_AK, ADMIN_SK, as_account
from tests.broker.conftest import ClusterHandle


async def test_acl_edits_keep_the_file_owner_only(acl_cluster: ClusterHandle, acl_home: Path) -> None:
    """The yml holds every secret key: an edit over the wire must not leave it readable by others."""
    path = acl_home / "conf" / "plain_acl.yml"
    os.chmod(path, 0o600)
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    try:
        header = CreateAccessConfigRequestHeader("newuser1", "newsecret1", default_topic_perm="PUB")
        r = await admin.call(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(header.to_ext_fields()))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert "newsecret1" in path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        await admin.client.close()


async def test_a_new_acl_file_is_owner_only(acl_cluster: ClusterHandle, acl_home: Path) -> None:
    path = acl_home / "conf" / "plain_acl.yml"
    text = path.read_text()
    path.unlink()
    (acl_home / "conf" / "acl").mkdir()
    (acl_home / "conf" / "acl" / "admins.yml").write_text(text)  # the admin's account lives on here
    admin = await as_account(acl_cluster, ADMIN_AK, ADMIN_SK)
    try:
        header = CreateAccessConfigRequestHeader("newuser1", "newsecret1")
        r = await admin.call(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, dict(header.to_ext_fields()))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # created for the new account
    finally:
        await admin.client.close()
