"""schema/history"""
