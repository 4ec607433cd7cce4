from __future__ import annotations
from typing import Any, Literal, NotRequired, TypedDict

class Address(TypedDict, total=False):
    city: str
    zip: str  # default: "00000"

class Contact(TypedDict):
    """One person."""
    name: str  # full name
    email: NotRequired[str]
    address: NotRequired[Address]
    tier: NotRequired[Literal["free", "pro"]]  # default: "free"

class AddContactsResult(TypedDict):
    added: int
    contacts: NotRequired[list[Contact]]

Filter = TypedDict("Filter", {
    "from": str,  # a date
    "per-page": NotRequired[int],
})

class FindContact(TypedDict):
    name: str

class Company(TypedDict):
    name: str
    employees: int

class ContactsContact(TypedDict):
    lat: float
    lon: float

class crm:
    @staticmethod
    def add_contacts(contacts: list[Contact]) -> AddContactsResult:
        """Add contacts."""

    @staticmethod
    def find(filter: Filter) -> FindContact | Company | None:
        """Find a contact or a company."""

class geo:
    @staticmethod
    def contacts(contacts: list[ContactsContact]) -> list[str]:
        """Places with a contact."""
