"""schema/follows"""
