"""Helpers shared by the end-to-end tests: live servers, PostgreSQL clusters and test datasets."""
