"""Scoring local records with the global model: the model fetched and cached, the detectors built
from it, the cohort columns of the released cohort model, the score files.
"""
