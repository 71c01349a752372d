"""Every fedod detector is a drop-in PyOD detector and a scikit-learn estimator.

The first block follows PyOD's own detector tests (``pyod/test/test_iforest.py``: parameters,
training scores, prediction scores/labels, ``predict_proba`` linear/unify/bad method,
confidence, rejection, ``fit_predict``, ``_predict_rank``, clone), parametrised over the
detectors in ``DETECTORS``: add a detector there and it gets the whole suite. Then PyOD's own
``BaseDetector`` methods serve as the oracle for ours, then the scikit-learn API (params,
clone, Pipeline, GridSearchCV, pickling); scikit-learn's estimator checks are in
``test_detector_sklearn_checks.py``. The detectors under test are ``detector_kit.DETECTORS``.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from detector_kit import DETECTORS, HI, LO, PyODTwin
from numpy.testing import assert_allclose, assert_array_equal
from pyod.models.lscp import LSCP
from pyod.utils.data import generate_data
from scipy.stats import rankdata
from sklearn.base import clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.metrics import average_precision_score, make_scorer, roc_auc_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler

from common.detectors import BaseDetector, LSHiTables, NotFittedError
from common.histograms.hashing import derive_lsh_family

PRIVATE = {"lsh-private", "grid-private", "centroid-private"}  # fresh OpenDP noise on every fit
EXTREMES = [[9.9, 9.9], [-9.9, 9.9], [0.0, 0.0]]  # beyond the training scores' range
ROC_FLOOR = 0.8  # PyOD's floor for its own detectors on this data
N_TRAIN, N_TEST, CONTAMINATION = 200, 100, 0.1


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    X_train, X_test, y_train, y_test = generate_data(
        n_train=N_TRAIN, n_test=N_TEST, contamination=CONTAMINATION, random_state=42)
    return X_train, X_test, y_train, y_test


@pytest.fixture(params=list(DETECTORS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clf(kind: str, data: Any) -> BaseDetector:
    return DETECTORS[kind](contamination=CONTAMINATION).fit(data[0])


def in_unit_interval(a: np.ndarray) -> bool:
    return bool(np.all((a >= 0) & (a <= 1)))


# -- PyOD's detector tests ------------------------------------------------------------------

def test_parameters(kind: str, clf: BaseDetector) -> None:
    for name in ("decision_scores_", "labels_", "threshold_", "_mu", "_sigma",
                 "n_features_in_"):
        assert getattr(clf, name) is not None, name
    fitted = [k for k in vars(clf) if not k.startswith("_")]
    assert set(fitted) - set(clf.get_params()), "fit sets no model attributes"
    assert all(k.endswith("_") for k in set(fitted) - set(clf.get_params()))
    fresh = DETECTORS[kind](contamination=CONTAMINATION)
    assert vars(fresh) == fresh.get_params(deep=False), "__init__ only stores hyperparameters"
    assert "random_state" in fresh.get_params()


def test_train_scores(clf: BaseDetector, data: Any) -> None:
    assert clf.decision_scores_.shape == (N_TRAIN,)
    assert_allclose(clf.decision_scores_, clf.decision_function(data[0]))
    assert clf.labels_.sum() <= CONTAMINATION * N_TRAIN
    assert_array_equal(clf.labels_, clf.decision_scores_ > clf.threshold_)


def test_prediction_scores(clf: BaseDetector, data: Any) -> None:
    scores = clf.decision_function(data[1])
    assert scores.shape == (N_TEST,) and scores.dtype == np.float64
    assert roc_auc_score(data[3], scores) >= ROC_FLOOR  # higher = more outlying


def test_prediction_labels(clf: BaseDetector, data: Any) -> None:
    labels = clf.predict(data[1])
    assert labels.shape == data[3].shape and set(np.unique(labels)) <= {0, 1}
    assert_array_equal(labels, clf.decision_function(data[1]) > clf.threshold_)


@pytest.mark.parametrize("method", [None, "linear", "unify"])
def test_prediction_proba(clf: BaseDetector, data: Any, method: str | None) -> None:
    X = np.vstack([data[1], EXTREMES])
    proba = clf.predict_proba(X) if method is None else clf.predict_proba(X, method)
    assert proba.shape == (len(X), 2) and in_unit_interval(proba)
    assert_allclose(proba.sum(axis=1), 1.0)
    order = np.argsort(clf.decision_function(X), kind="stable")
    assert np.all(np.diff(proba[order, 1]) >= 0), "P(outlier) grows with the score"


def test_prediction_proba_parameter(clf: BaseDetector, data: Any) -> None:
    with pytest.raises(ValueError, match="something"):
        clf.predict_proba(data[1], method="something")


def test_prediction_labels_confidence(clf: BaseDetector, data: Any) -> None:
    labels, confidence = clf.predict(data[1], return_confidence=True)
    assert_array_equal(labels, clf.predict(data[1]))
    assert confidence.shape == data[3].shape and in_unit_interval(confidence)
    assert_allclose(confidence, clf.predict_confidence(data[1]))


@pytest.mark.parametrize("method", ["linear", "unify"])
def test_prediction_proba_confidence(clf: BaseDetector, data: Any, method: str) -> None:
    proba, confidence = clf.predict_proba(data[1], method=method, return_confidence=True)
    assert_allclose(proba, clf.predict_proba(data[1], method=method))
    assert confidence.shape == data[3].shape and in_unit_interval(confidence)


def test_prediction_with_rejection(clf: BaseDetector, data: Any) -> None:
    labels = clf.predict_with_rejection(data[1], T=2)
    assert labels.shape == data[3].shape and set(np.unique(labels)) <= {-2, 0, 1}
    kept = labels != -2
    assert_array_equal(labels[kept], clf.predict(data[1])[kept])
    _, stats = clf.predict_with_rejection(data[1], return_stats=True)
    expected_rate, upper_rate, upper_cost = stats
    assert 0 <= expected_rate <= 1 and 0 <= upper_rate <= 1 and upper_cost >= 0


def test_fit_predict(kind: str, clf: BaseDetector, data: Any) -> None:
    labels = clf.fit_predict(data[0])
    assert labels.shape == data[2].shape
    assert_array_equal(labels, clf.labels_)
    if kind not in PRIVATE:
        assert_array_equal(labels, clf.predict(data[0]))


@pytest.mark.parametrize("normalized", [False, True])
def test_predict_rank(clf: BaseDetector, data: Any, normalized: bool) -> None:
    scores = clf.decision_function(data[1])
    ranks = clf._predict_rank(data[1], normalized=normalized)
    assert_allclose(rankdata(ranks), rankdata(scores), atol=3)  # the order is kept
    assert np.all(ranks < (1.01 if normalized else N_TRAIN + 1)) and np.all(ranks > -0.1)


def test_model_clone(kind: str, clf: BaseDetector, data: Any) -> None:
    copy = clone(clf)
    assert type(copy) is type(clf) and copy is not clf
    assert repr(copy) == repr(clf)
    with pytest.raises(NotFittedError):
        copy.decision_function(data[1])
    copy.fit(data[0])
    if kind not in PRIVATE:
        assert_allclose(copy.decision_function(data[1]), clf.decision_function(data[1]))


# -- PyOD's own BaseDetector as the oracle --------------------------------------------------

@pytest.mark.filterwarnings("ignore:The cost of rejection:UserWarning")  # PyOD, on its default
@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt:RuntimeWarning")  # PyOD
@pytest.mark.parametrize("call", [
    lambda det, X: (det.threshold_, det.labels_, det._mu, det._sigma),
    lambda det, X: det.predict_proba(X, method="linear"),
    lambda det, X: det.predict_proba(X, method="unify"),
    lambda det, X: det.predict_confidence(X),
    lambda det, X: det.predict(X, return_confidence=True),
    lambda det, X: det.predict_proba(X, method="unify", return_confidence=True),
    lambda det, X: det._predict_rank(X),
    lambda det, X: det._predict_rank(X, normalized=True),
    lambda det, X: det.predict_with_rejection(X, T=3),
    lambda det, X: det.predict_with_rejection(X, T=3, return_stats=True)[1],
    lambda det, X: det.compute_rejection_stats(T=8, delta=0.2, c_r=0.5),
], ids=["threshold", "linear", "unify", "confidence", "predict", "unify-confidence", "rank",
        "rank-normalized", "rejection", "rejection-stats", "rejection-stats-args"])
def test_same_as_pyod(clf: BaseDetector, data: Any, call: Callable[..., Any]) -> None:
    twin = PyODTwin(clf, data[0])
    X = np.vstack([data[1], EXTREMES])
    ours, theirs = call(clf, X), call(twin, X)
    if not isinstance(ours, tuple | list):
        ours, theirs = (ours,), (theirs,)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-9)


def test_in_a_pyod_ensemble(data: Any) -> None:
    """PyOD's LSCP combines fedod detectors like its own."""
    members = [DETECTORS["lsh"](), DETECTORS["grid"]()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LSCP's own warnings on constant local scores
        ensemble = LSCP(members, random_state=0).fit(data[0])
        scores = ensemble.decision_function(data[1])
    assert roc_auc_score(data[3], scores) >= ROC_FLOOR


# -- scikit-learn's estimator API -----------------------------------------------------------

def test_params(kind: str) -> None:
    det = DETECTORS[kind]()
    params = det.get_params(deep=True)
    assert params == det.get_params(deep=False) == vars(det)
    assert det.set_params(contamination=0.2, random_state=7) is det
    assert det.get_params()["contamination"] == 0.2 and det.random_state == 7
    with pytest.raises(ValueError, match="Invalid parameter 'nonsense'"):
        det.set_params(nonsense=1)
    assert repr(det).startswith(type(det).__name__ + "(")
    assert eval(repr(DETECTORS[kind.split("-")[0]]()), {type(det).__name__: type(det)})


@pytest.mark.parametrize("contamination", [0.0, 0.7, "auto", True])
def test_contamination_is_checked_at_fit(kind: str, data: Any, contamination: Any) -> None:
    det = DETECTORS[kind](contamination=contamination)  # scikit-learn: __init__ never raises
    with pytest.raises(ValueError, match="contamination"):
        det.fit(data[0])


def test_wrong_width_is_refused(clf: BaseDetector, data: Any) -> None:
    with pytest.raises(ValueError, match="X has 1 features, but .* is expecting 2 features"):
        clf.predict(data[1][:, :1])


def test_pipeline(kind: str, data: Any) -> None:
    pipe = Pipeline([("scale", MinMaxScaler()), ("detect", DETECTORS[kind]())]).fit(data[0])
    scaled = MinMaxScaler().fit(data[0]).transform(data[1])
    det = pipe[-1]
    assert_allclose(pipe.decision_function(data[1]), det.decision_function(scaled))
    assert_array_equal(pipe.predict(data[1]), det.predict(scaled))
    labels, confidence = pipe.predict(data[1], return_confidence=True)
    assert_allclose(confidence, det.predict_confidence(scaled))
    assert_allclose(pipe.predict_proba(data[1], method="unify"),
                    det.predict_proba(scaled, method="unify"))
    if kind not in PRIVATE:
        assert roc_auc_score(data[3], pipe.decision_function(data[1])) >= ROC_FLOOR


@pytest.mark.parametrize("scoring", [
    "roc_auc", make_scorer(average_precision_score, response_method="decision_function")])
def test_grid_search(data: Any, scoring: Any) -> None:
    """Hyperparameters chosen by cross-validated AUC against labels 1 = outlier."""
    X = np.vstack(data[:2])
    y = np.concatenate(data[2:])
    search = GridSearchCV(LSHiTables(sample_size=64, random_state=0),
                          {"n_tables": [1, 30], "scoring": ["log", "mass"]},
                          scoring=scoring, cv=StratifiedKFold(3, shuffle=True, random_state=0)
                          ).fit(X, y)
    assert search.best_params_["n_tables"] == 30
    assert search.best_score_ >= ROC_FLOOR
    assert isinstance(search.best_estimator_, LSHiTables)
    assert search.best_estimator_.predict(data[1]).shape == (N_TEST,)


def test_pickle_keeps_no_training_rows(kind: str, data: Any) -> None:
    det = DETECTORS[kind]().fit(data[0])
    assert det._calibrated is None  # nothing computed yet
    copy = pickle.loads(pickle.dumps(det))
    assert copy._lazy.rows is None, "the pickle holds scores, not the training rows"
    assert_allclose(copy.decision_scores_, det.decision_scores_)
    assert_array_equal(copy.predict(data[1]), det.predict(data[1]))


def test_lazy_scores_keep_state_and_fit_contamination(data: Any) -> None:
    det = DETECTORS["grid"](contamination=0.1).fit(data[0])
    before = dict(vars(det))
    det.set_params(contamination=0.3)  # after fit: the fitted threshold does not move
    det.predict(data[1])
    assert det.labels_.mean() <= 0.1
    assert vars(det).keys() == before.keys() and det._lazy is before["_lazy"]


def test_not_fitted_errors(kind: str, data: Any) -> None:
    for method in ("decision_function", "predict", "predict_proba", "predict_confidence"):
        with pytest.raises(SklearnNotFittedError):
            getattr(DETECTORS[kind](), method)(data[1])


def test_merged_model_needs_calibration(data: Any) -> None:
    family = derive_lsh_family(b"\x01" * 32, LO, HI, 10, 16)
    det = LSHiTables.from_histogram(family, family.histogram(data[0]), scoring="log")
    assert det.decision_function(data[1]).shape == (N_TEST,)
    with pytest.raises(NotFittedError, match="calibrate"):
        det.predict(data[1])
    assert det.calibrate(data[1]).predict_proba(data[1], method="unify").shape == (N_TEST, 2)
    with pytest.raises(ValueError, match="X has 3 features"):
        det.decision_function(np.zeros((2, 3)))
