"""Twenty pydantic models for structured-output tests and benchmarks (response_format=Model).

They cover what JSON-schema constrained decoding must handle: nested objects ($ref / $defs),
arrays with bounds, enums (Enum and Literal), optional (nullable) fields, integers and numbers
with bounds, string patterns and lengths. Strings and arrays are bounded so that a small model
under a constraint always finishes within a few hundred tokens.

scripts/make_schemas20.py writes the JSON schemas the openai client sends for them (its strict
form) to bench/schemas/schemas20.json.
"""
import enum
from typing import Annotated, List, Literal, Optional

from pydantic import BaseModel, Field



def name_field():
    return Field(min_length=1, max_length=24)


class Person(BaseModel):
    name: str = name_field()
    age: int = Field(ge=0, le=120)


class Address(BaseModel):
    street: str = Field(min_length=1, max_length=32)
    city: str = name_field()
    zip_code: str = Field(pattern=r"^[0-9]{5}$")
    country: Literal["FR", "DE", "IT", "US"]


class Book(BaseModel):
    title: str = Field(min_length=1, max_length=40)
    author: str = name_field()
    year: int = Field(ge=1450, le=2025)
    isbn: Optional[str] = Field(default=None, pattern=r"^[0-9]{13}$")


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Shirt(BaseModel):
    color: Color
    size: Literal["S", "M", "L", "XL"]
    price_eur: float = Field(ge=1, le=500)


class Point(BaseModel):
    x: float = Field(ge=-100, le=100)
    y: float = Field(ge=-100, le=100)


class Rectangle(BaseModel):
    top_left: Point
    bottom_right: Point


class TodoList(BaseModel):
    title: str = name_field()
    items: List[Annotated[str, Field(min_length=1, max_length=40)]] = Field(min_length=1,
                                                                           max_length=3)


class Product(BaseModel):
    name: str = name_field()
    price: float = Field(ge=0, le=10000)
    in_stock: bool
    tags: List[Literal["new", "sale", "eco", "premium"]] = Field(max_length=3)


class Weather(BaseModel):
    city: str = name_field()
    temperature_c: int = Field(ge=-60, le=60)
    condition: Literal["sunny", "cloudy", "rain", "snow"]


class Genre(str, enum.Enum):
    drama = "drama"
    comedy = "comedy"
    action = "action"
    horror = "horror"


class Movie(BaseModel):
    title: str = Field(min_length=1, max_length=40)
    rating: int = Field(ge=1, le=10)
    genres: List[Genre] = Field(min_length=1, max_length=3)


class Contact(BaseModel):
    email: str = Field(pattern=r"^[a-z]{1,12}@[a-z]{1,12}\.(com|org|net)$")
    phone: Optional[str] = Field(default=None, pattern=r"^\+[0-9]{8,12}$")


class OrderItem(BaseModel):
    name: str = name_field()
    quantity: int = Field(ge=1, le=100)


class Order(BaseModel):
    order_id: int = Field(ge=1, le=1000000)
    items: List[OrderItem] = Field(min_length=1, max_length=3)
    paid: bool


class Team(BaseModel):
    name: str = name_field()
    members: List[Person] = Field(min_length=1, max_length=3)


class Event(BaseModel):
    name: str = name_field()
    date: str = Field(pattern=r"^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$")
    attendees: int = Field(ge=0, le=1000)


class Ingredient(BaseModel):
    name: str = name_field()
    grams: int = Field(ge=1, le=1000)


class Recipe(BaseModel):
    name: str = name_field()
    ingredients: List[Ingredient] = Field(min_length=1, max_length=4)
    vegetarian: bool


class Coordinates(BaseModel):
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)


class Employee(BaseModel):
    name: str = name_field()
    department: Literal["sales", "engineering", "support", "finance"]
    manager: Optional[str] = Field(default=None, max_length=24)


class Survey(BaseModel):
    question: str = Field(min_length=1, max_length=40)
    answer: Literal["yes", "no", "maybe"]
    confidence: float = Field(ge=0, le=1)


class Inventory(BaseModel):
    warehouse: str = name_field()
    counts: List[int] = Field(min_length=1, max_length=5)
    audited: Optional[bool] = None


class Company(BaseModel):
    name: str = name_field()
    address: Address
    ceo: Person
    founded: int = Field(ge=1800, le=2025)


MODELS = [Person, Address, Book, Shirt, Point, Rectangle, TodoList, Product, Weather, Movie,
          Contact, Order, Team, Event, Recipe, Coordinates, Employee, Survey, Inventory, Company]
assert len(MODELS) == 20
