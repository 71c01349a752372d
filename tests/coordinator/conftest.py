"""Coordinator API fixtures: an app per test on SQLite and on PostgreSQL, clients, factories."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from api_kit import COHORTS
from coordinator_kit import ADMIN, ADMIN_TOKEN, bearer
from fastapi.testclient import TestClient
from secagg_honest import honest_vector
from secagg_http import Env, Hospital
from sqlalchemy import create_engine

from common.study.config import StudyConfig
from coordinator.config import Settings
from coordinator.db.tables import Base
from coordinator.main import create_app


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """A clean database per test: a SQLite file, or freshly created tables in the PG schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'coordinator.db'}"
    url = request.getfixturevalue("postgres_url")
    engine = create_engine(url)
    Base.metadata.drop_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def settings(db_url, tmp_path):
    return Settings(
        env="production",
        admin_token=ADMIN_TOKEN,
        database_url=db_url,
        data_dir=tmp_path,
        max_body_bytes=256 * 1024,
        log_json=True,
    )


@pytest.fixture
def app(settings):
    app = create_app(settings)
    Base.metadata.create_all(app.state.engine)
    yield app
    app.state.engine.dispose()


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c




@dataclass
class Enrolled:
    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token)


@pytest.fixture
def make_participant(client):
    """Factory: enrol a participant through the API, return its name and credential."""

    def make(name: str = "h1", epsilon_cap: str = "10", delta_cap: str = "0") -> Enrolled:
        r = client.post(
            "/v1/participants",
            json={"name": name, "epsilon_cap": epsilon_cap, "delta_cap": delta_cap},
            headers=ADMIN,
        )
        assert r.status_code == 201, r.text
        return Enrolled(name, r.json()["token"])

    return make


@pytest.fixture
def make_study(client, coord_kit):
    """Factory: create a study (and add members); return its signed config JSON."""

    def make(study_id: str = "s1", members=(), **spec) -> dict:
        r = client.post("/v1/studies", json=coord_kit.study_spec(study_id, **spec), headers=ADMIN)
        assert r.status_code == 201, r.text
        for member in members:
            r2 = client.post(
                f"/v1/studies/{study_id}/members", json={"participant": member.name}, headers=ADMIN
            )
            assert r2.status_code == 204, r2.text
        return r.json()["config"]

    return make


@pytest.fixture
def cohort_study(client, coord_kit, make_participant):
    """Study ``c1`` (3 features in [0, 1], k-means over 2 rounds) with members h1, h2."""

    def make(cohorts=COHORTS, members=("h1", "h2"), cap="10", delta_caps=None):
        hospitals = [make_participant(name, epsilon_cap=cap,
                                      delta_cap=(delta_caps or {}).get(name, "0"))
                     for name in members]
        spec = {**coord_kit.study_spec("c1"), "cohorts": cohorts}
        r = client.post("/v1/studies", json=spec, headers=ADMIN)
        assert r.status_code == 201, r.text
        for h in hospitals:
            assert client.post("/v1/studies/c1/members", json={"participant": h.name},
                               headers=ADMIN).status_code == 204
        config = StudyConfig.model_validate_json(r.json()["config"]["payload"])
        return config, hospitals

    return make


@pytest.fixture
def h1(make_participant):
    """Participant h1 with a cap of epsilon 1 (two releases of the default study)."""
    return make_participant("h1", epsilon_cap="1")


@pytest.fixture
def signed(make_study, h1):
    """Study s1 with h1 as its member; its signed config."""
    return make_study("s1", members=[h1])


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A coordinator deployment for admin commands: migrated SQLite in tmp_path, and the
    signing key that `serve` creates on its first start."""
    from coordinator.cli.main import EXIT_OK, main
    from coordinator.keys import KeyStore

    monkeypatch.setenv("FEDOD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("FEDOD_DATABASE_URL", raising=False)
    monkeypatch.delenv("FEDOD_ADMIN_TOKEN", raising=False)
    assert main(["migrate"]) == EXIT_OK
    KeyStore(tmp_path / "signing_key.pem").ensure()
    return tmp_path


@pytest.fixture
def cohort(client, make_participant, coord_kit):
    """A secure study of n = 4 (D = 1, T = 1: h_min 2, threshold 3) and four hospitals."""

    def make(n_hospitals=4, cap="10"):
        people = [make_participant(f"h{i}", epsilon_cap=cap) for i in range(n_hospitals)]
        spec = coord_kit.study_spec("sec", n_tables=5, epsilon_lsh="0.5")
        spec["aggregation"] = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1,
                               "max_colluders": 1}
        r = client.post("/v1/studies", json=spec, headers=ADMIN)
        assert r.status_code == 201, r.text
        for p in people:
            client.post("/v1/studies/sec/members", json={"participant": p.name}, headers=ADMIN)
        env = Env(client, r.json()["config"])
        rng = np.random.default_rng(3)
        hospitals = [Hospital(client, p, "sec", honest_vector(env.config, rng)) for p in people]
        assert env.certify(client, hospitals, ADMIN).status_code == 200
        return env, hospitals

    return make
