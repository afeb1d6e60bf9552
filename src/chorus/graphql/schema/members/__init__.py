"""schema/members"""
