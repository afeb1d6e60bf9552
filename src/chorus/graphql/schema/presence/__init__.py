"""schema/presence"""
