"""schema/common"""
