"""Local records: one file or a dataset of many, read in bounded memory and checked cell by cell
against the study's spec.
"""
