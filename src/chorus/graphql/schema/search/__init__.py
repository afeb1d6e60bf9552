"""schema/search"""
