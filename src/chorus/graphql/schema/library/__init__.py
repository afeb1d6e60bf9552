"""schema/library"""
