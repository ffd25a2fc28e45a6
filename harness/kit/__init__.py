"""The public kit for backend authors (docs/writing-a-backend.md).
"""
