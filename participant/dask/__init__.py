"""The Dask engine: exact histograms, cohort vectors and dataset-wide ranks of a many-file dataset
on a cluster.
"""
